// The freeze step: rank 0 decides the frozen count (the planner's freeze
// policy on the measured gradient norms) and takes the measurements the
// plan needs; it publishes them, and every process plans the same step
// from the same inputs.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

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
std::vector<IterationPrediction> Trainer::predict(const std::vector<IterationSetup>& setups, PredictionUse use) {
  if (use == PredictionUse::Plan || setups.size() < 2 || c_.exec.chunk_search_iterations == 0)
    return analytic_(setups, use);
  const int K = setups.front().K;
  auto known = p_.chunk_times.find(K);
  if (known == p_.chunk_times.end()) {
    if (!rank0() && pending_chunk_times_.empty())
      throw Error("rank " + std::to_string(env_.rank) + ": chunk search for K = " + std::to_string(K) +
                  ": no timing from rank 0");
    known = p_.chunk_times.emplace(K, rank0() ? chunk_times(setups) : pending_chunk_times_).first;
  }
  return to_predictions(known->second, setups.size(), K);
}

// Rank 0's timings of the candidates, from the memo or measured (and memoised).
std::vector<double> Trainer::chunk_times(const std::vector<IterationSetup>& setups) {
  const ChunkMemo memo(c_, cores_);
  std::vector<double> times = memo.find(setups);
  if (!times.empty()) return times;
  for (const auto& s : setups)
    times.push_back(time_chunk_candidate(*pipeline_, ctx_, data_.train, s, cores_, c_.exec.chunk_search_iterations));
  memo.add(setups, times);
  return times;
}

// Rank 0: the mean gradient norms of the interval, recorded, go to the
// planner's freeze policy; the cache probe runs at a new frozen depth.
int Trainer::decide_frozen(bool initial) {
  int frozen = 0;
  if (!initial) {
    std::vector<double> norms(L_, 0.0);
    for (int l = 0; l < L_; ++l)
      norms[l] = p_.interval_iterations ? p_.interval_norm_sum[l] / static_cast<double>(p_.interval_iterations) : 0;
    p_.grad_norms.push_back(norms);
    frozen = planner_.frozen_after(norms);  // the planner's freeze policy decides
  }
  if (frozen > 0 && c_.planner.autopipe && c_.planner.cache == CachePolicyKind::Auto &&
      !p_.cache_measurements.count(frozen)) {
    const CacheDecision analytic = decide_cache(c_, ctx_.spec, cost_, frozen, c_.training.batch_size);
    p_.cache_measurements[frozen] =
        probe_cache(model_, data_.train, c_.training.batch_size, frozen, pipeline_->device_of_sublayer(0),
                    cache_file(analytic.tier, "probe-" + std::to_string(env_.rank)), entry_shape());
  }
  return frozen;
}

// Plans the next freeze step. Returns false at the end of training.
bool Trainer::plan_step(bool initial) {
  const std::string key = "step/" + std::to_string(planner_.run().plans.size());
  const Clock::time_point t0 = Clock::now();
  if (rank0()) {
    const int frozen = decide_frozen(initial);
    if (p_.cache_measurements.count(frozen)) planner_.measured_cache(frozen, p_.cache_measurements.at(frozen));
    const Plan& next = planner_.next(frozen);
    json msg = {{"frozen", frozen}};
    if (const auto it = p_.chunk_times.find(next.K); it != p_.chunk_times.end()) msg["chunk_times"] = it->second;
    if (const auto it = p_.cache_measurements.find(frozen); it != p_.cache_measurements.end())
      msg["cache"] = {it->second.read_s, it->second.frozen_forward_s};
    if (dist_) dist_->control(key, msg);
    p_.frozen_history.push_back(frozen);
  } else {
    const json msg = dist_->control(key);
    if (msg.contains("end")) return false;
    const int frozen = msg.at("frozen");
    if (msg.contains("cache")) {
      p_.cache_measurements[frozen] = {msg["cache"][0], msg["cache"][1]};
      planner_.measured_cache(frozen, p_.cache_measurements.at(frozen));
    }
    if (msg.contains("chunk_times")) pending_chunk_times_ = msg.at("chunk_times").get<std::vector<double>>();
    planner_.next(frozen);
    p_.frozen_history.push_back(frozen);
  }
  // Copies: the planner's vector of plans grows (and moves) at every step.
  if (plan_) prev_storage_ = plan_storage_;
  previous_plan_ = plan_ ? &prev_storage_ : nullptr;
  plan_storage_ = planner_.run().plans.back();
  plan_ = &plan_storage_;
  pending_chunk_times_.clear();
  planning_s_ = seconds(t0, Clock::now());
  return true;
}

std::string Trainer::cache_file(CacheTier tier, const std::string& name) const {
  return cache_path(c_, opt_.out_dir, tier, name);
}

// The shape of one cache entry (the stem's output for one sample).
std::vector<std::int64_t> Trainer::entry_shape() {
  if (entry_shape_.empty()) {
    c10::NoGradGuard no_grad;
    const MicroBatch one = make_batch(data_.train, {0});
    const at::Tensor out = model_.forward({0, 1}, one.input.to(pipeline_->device_of_sublayer(0)));
    entry_shape_ = out.sizes().slice(1).vec();
  }
  return entry_shape_;
}

}  // namespace ep::exec
