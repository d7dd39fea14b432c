// The executor's side of a freeze step in the run loop (planner/run_loop):
// rank 0 hands the measured gradient norms to the planner's freeze policy
// and takes the measurements the plan needs; it publishes them, and every
// process plans the same step from the same inputs.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <charconv>
#include <cmath>
#include <filesystem>

#include "exec/measure.hpp"
#include "exec/trainer_impl.hpp"

namespace ep::exec {

using nlohmann::json;

namespace {

std::vector<IterationPrediction> to_predictions(const std::vector<double>& times, std::size_t n, int K) {
  if (times.size() != n)
    throw Error("chunk search for K = " + std::to_string(K) + ": " + std::to_string(times.size()) +
                " timings for " + std::to_string(n) + " candidates");
  std::vector<IterationPrediction> out;
  for (const double t : times) out.push_back({t, 0});
  return out;
}

}  // namespace

// Chunk-search candidates are timed for real (rank 0, memoised per
// environment, K and batch); the others receive rank 0's table. A plan's
// predicted throughput stays the cost model's.
std::vector<IterationPrediction> Trainer::predict(const std::vector<IterationProgram>& programs, PredictionUse use) {
  if (use == PredictionUse::Plan || programs.size() < 2 || x_.chunk_search_iterations == 0)
    return analytic_(programs, use);
  const int K = programs.front().setup.K;
  auto known = p_.chunk_times.find(K);
  if (known == p_.chunk_times.end()) {
    if (!rank0())
      throw Error("rank " + std::to_string(env_.rank) + ": chunk search for K = " + std::to_string(K) +
                  ": no timing from rank 0");
    known = p_.chunk_times.emplace(K, chunk_times(programs)).first;
  }
  return to_predictions(known->second, programs.size(), K);
}

// Rank 0's timings of the candidates, from the memo or measured (and memoised).
std::vector<double> Trainer::chunk_times(const std::vector<IterationProgram>& programs) {
  const ChunkMemo memo(c_, cores_);
  std::vector<double> times = memo.find(programs);
  if (!times.empty()) return times;
  const Clock::time_point t0 = Clock::now();
  for (const IterationProgram& p : programs)
    times.push_back(time_chunk_candidate(*pipeline_, data_.train, timing_program(ctx_, p), x_.chunk_search_iterations));
  memo.add(programs, times);
  // Said, because no epoch holds it: it runs in the run's start, before the
  // plan it chooses, once per machine, and does the process's one-off work
  // there in the start iterations' stead.
  std::string line = "chunk search for K = " + std::to_string(programs.front().setup.K) + ": M =";
  char buf[48];
  for (std::size_t i = 0; i < programs.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s %d (%.2f ms)", i ? "," : "", programs[i].setup.M, times[i] * 1e3);
    line += buf;
  }
  const double searched_s = seconds(t0, Clock::now());
  std::snprintf(buf, sizeof buf, " per iteration, timed in %.2f s", searched_s);
  log(line + buf + "; kept in " + memo.path() + " for later runs");
  if (p_.epoch == 0 && p_.iteration == 0) {  // before the process's first epoch, not inside a freeze step
    // Milliseconds, in the shortest text of that value: a JSON number in the trace.
    const double ms = std::round(searched_s * 1e3) / 1e3;
    timeline_.note(trace::kChunkSearchBeforeFirstEpochKey, std::string(buf, std::to_chars(buf, buf + sizeof buf, ms).ptr));
  }
  return times;
}

// Rank 0: the interval's mean gradient norms, recorded (the planner's
// freeze policy decides on them), where the plan computes them.
std::vector<double> Trainer::grad_norms() {
  if (!plan_->program.setup.grad_norms) return {};  // the freeze policy reads none: none computed
  std::vector<double> norms(L_, 0.0);
  for (int l = 0; l < L_; ++l)
    norms[l] = p_.interval_iterations ? p_.interval_norm_sum[l] / static_cast<double>(p_.interval_iterations) : 0;
  p_.grad_norms.push_back(norms);
  return norms;
}

// Rank 0: the cache probe at a frozen depth, once per depth: an earlier
// step's at that depth is taken (the run state's steps hold it, so a
// resumed run plans with the same measurement).
std::optional<MeasuredCache> Trainer::probe_cache(int frozen) {
  for (const StepInputs& in : p_.steps)
    if (in.frozen_layers == frozen && in.cache) return in.cache;
  const Clock::time_point t0 = Clock::now();
  double setup_s = 0;
  if (!probe_) {  // its set-up (batch on the device, probe file) once per run
    const CacheDecision analytic = decide_cache(c_, ctx_.spec, cost_, frozen, c_.training.batch_size);
    probe_ = std::make_unique<CacheProbe>(data_.train, c_.training.batch_size, pipeline_->device_of_sublayer(0),
                                          c_.training.precision == Precision::BF16,
                                          cache_file(analytic.tier, "probe-" + std::to_string(env_.rank)),
                                          entry_shape());
    setup_s = seconds(t0, Clock::now());
  }
  MeasuredCache measured;
  on_worker([&] {
    measured =
        probe_->measure(model_, frozen, [this](int sublayer) { return pipeline_->device_of_sublayer(sublayer); });
  });
  meter_.probed(seconds(t0, Clock::now()), setup_s, probe_->last_parts());
  return measured;
}

void Trainer::begin_step(int) {
  meter_.begin(c_.device == DeviceKind::CUDA ? pinned_allocs_now() : std::nullopt);
}

namespace {
std::string step_key(int step) { return "step/" + std::to_string(step); }
}  // namespace

// Rank 0: the step's inputs, and every chunk timing it holds (the step may
// have timed several K: its finalists, its probe's), to every other process.
void Trainer::publish(int step, const StepInputs& in, const Plan&) {
  json msg = {{"frozen", in.frozen_layers}, {"chunk_times", chunk_times_json()}};
  if (in.cache) msg["cache"] = {in.cache->read_s, in.cache->frozen_forward_s};
  if (!in.frozen_inside.empty()) msg["inside"] = in.frozen_inside;
  if (!in.frozen_set_reason.empty()) msg["set_reason"] = in.frozen_set_reason;
  if (dist_) dist_->control(step_key(step), msg);
  p_.steps.push_back(in);
}

// The others: rank 0's inputs; its chunk timings answer this process's
// chunk search (predict) while it plans the same step, before or after a
// resume with other replica counts alike.
StepInputs Trainer::follow(int step) {
  const json msg = dist_->control(step_key(step));
  StepInputs in;
  in.frozen_layers = msg.at("frozen");
  if (msg.contains("cache")) in.cache = MeasuredCache{msg["cache"][0], msg["cache"][1]};
  if (msg.contains("inside")) in.frozen_inside = msg["inside"].get<std::vector<int>>();
  if (msg.contains("set_reason")) in.frozen_set_reason = msg["set_reason"].get<std::string>();
  take_chunk_times(msg.at("chunk_times"));
  p_.steps.push_back(in);
  return in;
}

json Trainer::chunk_times_json() const {
  json times = json::object();
  for (const auto& [K, t] : p_.chunk_times) times[std::to_string(K)] = t;
  return times;
}

void Trainer::take_chunk_times(const json& times) {
  for (const auto& [K, t] : times.items()) p_.chunk_times.emplace(std::stoi(K), t.get<std::vector<double>>());
}

std::string Trainer::cache_file(CacheTier tier, const std::string& name) const {
  return cache_path(c_, opt_.out_dir, tier, name);
}

// The shape of one cache entry (the stem's output for one sample).
std::vector<std::int64_t> Trainer::entry_shape() {
  if (entry_shape_.empty()) {
    on_worker([&] {
      c10::NoGradGuard no_grad;
      const MicroBatch one = make_batch(data_.train, {0});
      const at::Tensor out = model_.forward({0, 1}, one.input.to(pipeline_->device_of_sublayer(0)));
      entry_shape_ = out.sizes().slice(1).vec();
    });
  }
  return entry_shape_;
}

void Trainer::on_worker(const std::function<void()>& task) {
  pipeline_->on_worker(plan_ ? plan_->program.threads.worker
                             : worker_threads(c_, c_.planner.K, c_.cluster.gpus_per_node, cores_).worker,
                       task);
}

}  // namespace ep::exec
