#include "exec/trainer.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "exec/cache.hpp"
#include "exec/checkpoint.hpp"
#include "exec/data.hpp"
#include "exec/dist.hpp"
#include "exec/model.hpp"
#include "exec/optimizer.hpp"
#include "exec/pipeline.hpp"
#include "exec/state.hpp"
#include "exec/torch_compat.hpp"
#include "planner/freeze.hpp"
#include "planner/random.hpp"
#include "planner/run_plan.hpp"
#include "traces/atomic_file.hpp"
#include "traces/output_dir.hpp"

namespace ep::exec {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

void check_process_count(const Config& c, int processes) {
  const int gpus = c.cluster.total_gpus();
  // One process per potential pipeline: the planner's process model (one per
  // GPU, node-major ranks), so every layout's ranks exist.
  if (processes != 1 && processes != gpus)
    throw Error("this job has " + std::to_string(processes) + " processes; " + c.source +
                " needs one per device: cluster.nodes x cluster.gpus_per_node = " + std::to_string(gpus) +
                " (elasticpipe train --nproc " + std::to_string(gpus) + ")");
}

namespace {

// What this job cannot run, refused before any work.
void check_runnable(const Config& c, const ProcessEnv& env) {
  const bool vit = c.model.family == ModelFamily::ViT;
  const std::string& name = c.data.name;
  if (name != "fashion-mnist" && name != "synthetic-images" && name != "synthetic-tokens")
    throw c.error("data.name", "fashion-mnist|synthetic-images|synthetic-tokens to train", "\"" + name + "\"");
  if (vit != (name != "synthetic-tokens"))
    throw c.error("data.name", vit ? "an image dataset for model.family = \"vit\"" : "synthetic-tokens for model.family = \"bert\"",
                  "\"" + name + "\"");
  if (name == "fashion-mnist" && c.model.num_channels != 1)
    throw c.error("model.num_channels", "1 for fashion-mnist (grey images)", std::to_string(c.model.num_channels));
  if (name == "fashion-mnist" && c.model.num_labels != 10)
    throw c.error("model.num_labels", "10 for fashion-mnist", std::to_string(c.model.num_labels));
  // Every K a plan can reach (the planner's list).
  int most = 1, most_K = c.planner.K;
  for (const int K : reachable_K(c)) {
    const int r = replica_layout(c, K).replicas;
    if (r > most) most = r, most_K = K;
  }
  const int gpus = c.cluster.total_gpus();
  check_process_count(c, env.world_size);
  if (most > 1 && env.world_size == 1)
    throw Error(c.source + ": the plans reach " + std::to_string(most) + " data-parallel replicas (at K = " +
                std::to_string(most_K) + "); one process trains one pipeline: run elasticpipe train --nproc " +
                std::to_string(gpus) + " (or set planner.autodp = false)");
  // Synthetic data sets live in memory: a size beyond this machine's is
  // refused before any allocation (which would otherwise swap or be killed).
  if (name != "fashion-mnist") {
    const double per_sample = vit ? 4.0 * c.model.num_channels * c.model.image_size * c.model.image_size
                                  : 8.0 * c.model.seq_length;
    const double bytes = per_sample * static_cast<double>(c.data.num_train_samples + c.data.num_test_samples);
    const double ram = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
    if (ram > 0 && bytes > ram / 2) {
      char found[160];
      std::snprintf(found, sizeof found, "%lld (%.3g GB of samples, with the test set)",
                    static_cast<long long>(c.data.num_train_samples), bytes / 1e9);
      char expected[200];
      std::snprintf(expected, sizeof expected,
                    "synthetic samples that fit half of this machine's %.3g GB of memory", ram / 1e9);
      throw c.error("data.num_train_samples", expected, found);
    }
  }
  if (c.exec.device == ExecDevice::CUDA && !at::hasCUDA())
    throw c.error("exec.device", "cpu (this LibTorch has no CUDA; build with -DELASTICPIPE_CUDA=ON against a CUDA LibTorch)",
                  "\"cuda\"");
}

struct Data {
  Dataset train, test;
};

Data load_data(const Config& c) {
  const auto& m = c.model;
  const std::uint64_t seed = c.training.seed;
  if (c.data.name == "fashion-mnist") {
    const std::string dir = fashion_mnist_dir(c.data.path);
    return {load_fashion_mnist(dir, true, m.image_size, c.data.num_train_samples),
            load_fashion_mnist(dir, false, m.image_size, c.data.num_test_samples)};
  }
  if (c.data.name == "synthetic-images")
    return {synthetic_images(c.data.num_train_samples, m.num_channels, m.image_size, m.num_labels, seed, true),
            synthetic_images(c.data.num_test_samples, m.num_channels, m.image_size, m.num_labels, seed, false)};
  return {synthetic_tokens(c.data.num_train_samples, m.seq_length, m.vocab_size, m.num_labels, seed, true),
          synthetic_tokens(c.data.num_test_samples, m.seq_length, m.vocab_size, m.num_labels, seed, false)};
}

// The samples of `indices` (-1: a masked slot, zeros with weight 0).
MicroBatch make_batch(const Dataset& d, std::vector<std::int64_t> indices) {
  const auto n = static_cast<std::int64_t>(indices.size());
  const std::int64_t numel = d.sample_numel();
  MicroBatch mb;
  mb.labels = at::zeros({n}, at::kLong);
  mb.weights = at::zeros({n}, at::kFloat);
  auto* labels = mb.labels.data_ptr<std::int64_t>();
  auto* weights = mb.weights.data_ptr<float>();
  if (d.kind == SampleKind::Image) {
    mb.input = at::zeros({n, d.channels, d.height, d.width}, at::kFloat);
    float* out = mb.input.data_ptr<float>();
    for (std::int64_t i = 0; i < n; ++i)
      if (indices[i] >= 0) std::copy_n(d.pixels.data() + indices[i] * numel, numel, out + i * numel);
  } else {
    mb.input = at::zeros({n, d.seq_length}, at::kLong);
    std::int64_t* out = mb.input.data_ptr<std::int64_t>();
    for (std::int64_t i = 0; i < n; ++i)
      if (indices[i] >= 0) std::copy_n(d.tokens.data() + indices[i] * numel, numel, out + i * numel);
  }
  for (std::int64_t i = 0; i < n; ++i)
    if (indices[i] >= 0) {
      labels[i] = d.labels[indices[i]];
      weights[i] = 1;
    }
  mb.indices = std::move(indices);
  return mb;
}


std::vector<at::Device> devices(const Config& c) {
  std::vector<at::Device> d;
  const int K0 = c.planner.K;
  const int gpus = c.exec.device == ExecDevice::CUDA ? std::max<int>(1, static_cast<int>(at::getNumGPUs())) : 1;
  // Up to K0 devices; a plan moves them to its replica's block (plan_devices).
  for (int k = 0; k < K0; ++k)
    d.emplace_back(c.exec.device == ExecDevice::CUDA ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(k % gpus))
                                                      : at::Device(at::kCPU));
  return d;
}

// Traced actions of one iteration as trace events on per-device tracks;
// a send and its receive share a flow id.
struct TraceBuilder {
  trace::Trace trace;
  std::int64_t next_flow = 1;
  std::string device_prefix;

  void add(const IterationResult& r, const Plan& plan, int epoch, int iteration) {
    std::map<std::tuple<ActionKind, int, int>, std::int64_t> flows;  // (send kind, stage, mb) -> id
    std::vector<trace::Event> events;
    for (const ActionRecord& rec : r.records) {
      const Action& a = rec.action;
      trace::Event e;
      e.track = trace.track({trace::TrackKind::Gpu, 0, rec.device, device_prefix + std::to_string(rec.device), 0});
      e.name = to_string(a);
      e.category = trace::action_category(a.kind);
      e.start_s = rec.start_s;
      e.end_s = std::max(rec.end_s, rec.start_s);
      e.stage = a.stage;
      e.microbatch = a.microbatch;
      e.bucket = a.bucket;
      e.replica = 0;
      e.plan_id = plan.id;
      e.iteration = iteration;
      e.epoch = epoch;
      if (a.kind == ActionKind::SendAct) e.flow_out = flows[{ActionKind::SendAct, a.stage + 1, a.microbatch}] = next_flow++;
      if (a.kind == ActionKind::SendGrad) e.flow_out = flows[{ActionKind::SendGrad, a.stage - 1, a.microbatch}] = next_flow++;
      events.push_back(e);
    }
    for (std::size_t i = 0; i < r.records.size(); ++i) {
      const Action& a = r.records[i].action;
      const ActionKind send = a.kind == ActionKind::RecvAct ? ActionKind::SendAct : ActionKind::SendGrad;
      if (a.kind == ActionKind::RecvAct || a.kind == ActionKind::RecvGrad) {
        const auto it = flows.find({send, a.stage, a.microbatch});
        if (it != flows.end()) events[i].flow_in = it->second;
      }
    }
    const std::size_t first = trace.events.size();
    trace.events.insert(trace.events.end(), events.begin(), events.end());
    trace::separate_overlaps(trace, first);
  }

  void transition(double start, double end, int epoch, const std::string& what) {
    trace::Event e;
    e.track = trace.track({trace::TrackKind::Gpu, 0, 0, device_prefix + "0", 0});
    e.name = what;
    e.category = "transition";
    e.start_s = start;
    e.end_s = end;
    e.epoch = epoch;
    const std::size_t first = trace.events.size();
    trace.events.push_back(e);
    trace::separate_overlaps(trace, first);
  }
};

// Per-iteration measures from traced actions: F/B busy time per device and
// the bubble (1 − F/B time / (K · makespan)), and all-reduce time per
// device (the union of its bucket spans: they overlap each other).
struct Traced {
  double compute_s = 0, bubble = 0, comm_s = 0;
  int iterations = 0;
  void add(const IterationResult& r, int K) {
    if (r.records.empty()) return;
    double lo = r.records.front().start_s, hi = lo, fb = 0, busy = 0;
    for (const ActionRecord& rec : r.records) {
      lo = std::min(lo, rec.start_s);
      hi = std::max(hi, rec.end_s);
      const ActionKind k = rec.action.kind;
      const double d = rec.end_s - rec.start_s;
      if (k == ActionKind::Forward || k == ActionKind::Backward) fb += d;
      if (is_compute(k)) busy += d;
    }
    std::vector<std::vector<std::pair<double, double>>> spans(K);
    for (const ActionRecord& rec : r.records)
      if (rec.action.kind == ActionKind::AllReduce && rec.device < K) spans[rec.device].push_back({rec.start_s, rec.end_s});
    for (auto& sp : spans) {
      std::sort(sp.begin(), sp.end());
      double end = -1e300, sum = 0;
      for (const auto& [a, b] : sp) {
        sum += std::max(0.0, b - std::max(a, end));
        end = std::max(end, b);
      }
      comm_s += sum / K;
    }
    compute_s += busy / K;
    bubble += hi > lo ? 1 - fb / (K * (hi - lo)) : 0;
    ++iterations;
  }
};


json to_json(const trace::EpochMetrics& m) {
  return {{"epoch", m.epoch}, {"plan_id", m.plan_id}, {"frozen_layers", m.frozen_layers}, {"K", m.K}, {"M", m.M},
          {"replicas", m.replicas}, {"cache", m.cache}, {"epoch_s", m.epoch_s}, {"iteration_s", m.iteration_s},
          {"samples_per_s", m.samples_per_s}, {"bubble_fraction", m.bubble_fraction}, {"comm_s", m.comm_s},
          {"compute_s", m.compute_s}, {"cache_hit_ratio", m.cache_hit_ratio}, {"transition_s", m.transition_s},
          {"loss", m.loss}, {"accuracy", m.accuracy}};
}

trace::EpochMetrics epoch_from_json(const json& j) {
  trace::EpochMetrics m;
  m.source = "exec";
  m.mode = "train";
  m.epoch = j.at("epoch");
  m.plan_id = j.at("plan_id");
  m.frozen_layers = j.at("frozen_layers");
  m.K = j.at("K");
  m.M = j.at("M");
  m.replicas = j.at("replicas");
  m.cache = j.at("cache");
  m.epoch_s = j.at("epoch_s");
  m.iteration_s = j.at("iteration_s");
  m.samples_per_s = j.at("samples_per_s");
  m.bubble_fraction = j.at("bubble_fraction");
  m.comm_s = j.at("comm_s");
  m.compute_s = j.at("compute_s");
  m.cache_hit_ratio = j.at("cache_hit_ratio");
  m.transition_s = j.at("transition_s");
  m.loss = j.at("loss");
  m.accuracy = j.at("accuracy");
  return m;
}

json to_json(const TransitionCost& t) {
  return {{"epoch", t.epoch}, {"frozen_before", t.frozen_before}, {"frozen_after", t.frozen_after},
          {"K_before", t.K_before}, {"K_after", t.K_after}, {"replicas_before", t.replicas_before},
          {"replicas_after", t.replicas_after}, {"planning_s", t.planning_s},
          {"state_transfer_s", t.state_transfer_s}, {"rebuild_s", t.rebuild_s},
          {"repartition_s", t.repartition_s}, {"warmup_s", t.warmup_s}, {"total_s", t.total_s()}};
}

TransitionCost transition_from_json(const json& j) {
  TransitionCost t;
  t.epoch = j.at("epoch");
  t.frozen_before = j.at("frozen_before");
  t.frozen_after = j.at("frozen_after");
  t.K_before = j.at("K_before");
  t.K_after = j.at("K_after");
  t.replicas_before = j.at("replicas_before");
  t.replicas_after = j.at("replicas_after");
  t.planning_s = j.at("planning_s");
  t.state_transfer_s = j.at("state_transfer_s");
  t.rebuild_s = j.at("rebuild_s");
  t.repartition_s = j.at("repartition_s");
  t.warmup_s = j.at("warmup_s");
  return t;
}

// Where training stands, apart from weights and optimizer state: what a
// checkpoint stores and what a woken replica receives.
struct Progress {
  int epoch = 0;
  std::int64_t consumed = 0;  // sampler slots of every node's order used this epoch
  std::int64_t iteration = 0;  // iterations run this epoch
  std::vector<double> interval_norm_sum;
  std::int64_t interval_iterations = 0;
  std::vector<int> frozen_history;                    // per freeze step T
  std::map<int, std::vector<double>> chunk_times;     // K -> measured iteration time per candidate M
  std::map<int, MeasuredCache> cache_measurements;    // frozen layers -> measured read / frozen forward
  double train_s = 0;
  // The running epoch's totals (global: loss and counts are all-reduced per iteration).
  double epoch_loss_sum = 0;
  std::int64_t epoch_real = 0, epoch_correct = 0;
  double epoch_elapsed_s = 0;
  TrainResult result;
};

json to_json(const Progress& p) {
  json chunks = json::object(), caches = json::object(), epochs = json::array(), transitions = json::array();
  for (const auto& [K, t] : p.chunk_times) chunks[std::to_string(K)] = t;
  for (const auto& [f, m] : p.cache_measurements)
    caches[std::to_string(f)] = {{"read_s", m.read_s}, {"frozen_forward_s", m.frozen_forward_s}};
  for (const auto& e : p.result.epochs) epochs.push_back(to_json(e));
  for (const auto& t : p.result.transitions) transitions.push_back(to_json(t));
  return {{"epoch", p.epoch},
          {"consumed", p.consumed},
          {"iteration", p.iteration},
          {"interval_norm_sum", p.interval_norm_sum},
          {"interval_iterations", p.interval_iterations},
          {"frozen_history", p.frozen_history},
          {"chunk_times", chunks},
          {"cache_measurements", caches},
          {"train_s", p.train_s},
          {"epoch_loss_sum", p.epoch_loss_sum},
          {"epoch_real", p.epoch_real},
          {"epoch_correct", p.epoch_correct},
          {"epoch_elapsed_s", p.epoch_elapsed_s},
          {"epochs", epochs},
          {"transitions", transitions},
          {"iteration_losses", p.result.iteration_losses},
          {"grad_norms", p.result.grad_norms}};
}

Progress progress_from_json(const json& j) {
  Progress p;
  p.epoch = j.at("epoch");
  p.consumed = j.at("consumed");
  p.iteration = j.at("iteration");
  p.interval_norm_sum = j.at("interval_norm_sum").get<std::vector<double>>();
  p.interval_iterations = j.at("interval_iterations");
  p.frozen_history = j.at("frozen_history").get<std::vector<int>>();
  for (const auto& [K, t] : j.at("chunk_times").items()) p.chunk_times[std::stoi(K)] = t.get<std::vector<double>>();
  for (const auto& [f, m] : j.at("cache_measurements").items())
    p.cache_measurements[std::stoi(f)] = {m.at("read_s"), m.at("frozen_forward_s")};
  p.train_s = j.at("train_s");
  p.epoch_loss_sum = j.at("epoch_loss_sum");
  p.epoch_real = j.at("epoch_real");
  p.epoch_correct = j.at("epoch_correct");
  p.epoch_elapsed_s = j.at("epoch_elapsed_s");
  for (const auto& e : j.at("epochs")) p.result.epochs.push_back(epoch_from_json(e));
  for (const auto& t : j.at("transitions")) p.result.transitions.push_back(transition_from_json(t));
  p.result.iteration_losses = j.at("iteration_losses").get<std::vector<double>>();
  p.result.grad_norms = j.at("grad_norms").get<std::vector<std::vector<double>>>();
  return p;
}

// What a checkpoint must agree on with the config that resumes it: the
// model, the data and the training's fixed hyper-parameters. (Cluster and
// planner keys may differ: the resumed job replans with the recorded frozen
// counts, possibly with another replica count.)
json fingerprint(const Config& c) {
  const auto& m = c.model;
  return {{"model.family", to_string(m.family)},
          {"model.num_hidden_layers", m.num_hidden_layers},
          {"model.hidden_size", m.hidden_size},
          {"model.num_attention_heads", m.num_attention_heads},
          {"model.intermediate_size", m.intermediate_size},
          {"model.image_size", m.image_size},
          {"model.patch_size", m.patch_size},
          {"model.num_channels", m.num_channels},
          {"model.seq_length", m.seq_length},
          {"model.vocab_size", m.vocab_size},
          {"model.num_labels", m.num_labels},
          {"data.name", c.data.name},
          {"data.num_train_samples", c.data.num_train_samples},
          {"training.epochs", c.training.epochs},
          {"training.batch_size", c.training.batch_size},
          {"training.optimizer", to_string(c.training.optimizer)},
          {"training.seed", c.training.seed},
          {"planner.freeze_interval_epochs", c.planner.freeze_interval_epochs}};
}

void check_fingerprint(const json& saved, const Config& c, const std::string& path) {
  const json now = fingerprint(c);
  for (const auto& [key, value] : now.items()) {
    if (!saved.contains(key))
      throw Error("checkpoint " + path + " does not record " + key + "; it was not written by this version");
    if (saved.at(key) != value)
      throw Error("checkpoint " + path + " was written with " + key + " = " + saved.at(key).dump() + ", " +
                  c.source + " has " + value.dump() + ": refusing to resume a different run");
  }
}

std::string hex(std::uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::uint64_t hash_text(const std::string& s) {
  std::uint64_t h = 0x9e3779b97f4a7c15ULL;
  for (const unsigned char ch : s) h = mix64(h ^ ch);
  return h;
}

// Where a job's node-shared cache files live: the tier's folder (empty: the
// job's <out>/cache, else the system temp folder).
std::string cache_dir(const Config& c, CacheTier tier, const std::string& out_dir) {
  const std::string& dir = tier == CacheTier::HostMemory ? c.exec.cache_memory_dir : c.exec.cache_disk_dir;
  if (!dir.empty()) return dir;
  return out_dir.empty() ? std::filesystem::temp_directory_path().string()
                         : (std::filesystem::path(out_dir) / "cache").string();
}

// "elasticpipe-<job>-": one file per (job, node), the job named by its
// output folder (or config) so that concurrent jobs on one machine do not
// share entries.
std::string cache_file_prefix(const Config& c, const std::string& out_dir) {
  const std::string job =
      hex(hash_text(std::filesystem::absolute(out_dir.empty() ? c.source : out_dir).string())).substr(0, 12);
  return "elasticpipe-" + job + "-";
}

class Trainer {
 public:
  Trainer(const Config& c, const TrainOptions& opt)
      : c_(c),
        opt_(opt),
        env_(opt.process),
        data_(load_data(c)),
        L_(c.model.num_hidden_layers),
        batch_(c.training.batch_size),
        cost_(c.cluster, c.training),
        ctx_(c, cost_),
        analytic_(analytic_predictor(ctx_)),
        planner_(c, cost_, [this](const std::vector<IterationSetup>& s, PredictionUse use) { return predict(s, use); }),
        model_(c.model, c.training.seed),
        optimizer_(c.training),
        sampler_{data_.train.size, c.cluster.nodes, c.training.seed},
        node_(env_.rank / c.cluster.gpus_per_node),
        leader_(env_.rank % c.cluster.gpus_per_node == 0),
        cores_(static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))) {
    if (env_.world_size > 1)
      dist_ = std::make_unique<Dist>(env_, std::chrono::milliseconds(static_cast<std::int64_t>(
                                               c.exec.collective_timeout_s * 1000)));
    PipelineOptions po{devices(c), c.exec.threads_per_worker, c.training.precision == Precision::BF16,
                       c.training.checkpointing};
    pipeline_ = std::make_unique<Pipeline>(model_, optimizer_, po);
    pipeline_->set_reducer(dist_.get());
    compat::set_thread_count(std::max(1, cores_ / std::max(1, c.cluster.gpus_per_node)));
    p_.interval_norm_sum.assign(L_, 0.0);
    if (!opt.out_dir.empty() && rank0()) create_output_dir(opt.out_dir);
    init_trace();
  }

  TrainResult run() {
    if (!opt_.resume.empty()) resume();
    else plan_step(true);
    enter_plan(nullptr);
    while (true) {
      if (!active()) {
        if (!plan_step(false)) break;  // waits for the next transition (or the end)
        enter_plan(nullptr);
        continue;
      }
      if (p_.epoch >= c_.training.epochs) break;
      if (p_.epoch == plan_->end_epoch && p_.consumed == 0) {
        transition();
        continue;
      }
      run_epoch();
    }
    if (dist_) {
      if (rank0()) dist_->control("step/" + std::to_string(planner_.run().plans.size()), json{{"end", true}});
      dist_->barrier("end of training");
    }
    p_.result.total_s = p_.train_s;
    p_.result.final_accuracy = p_.result.epochs.empty() ? -1 : p_.result.epochs.back().accuracy;
    p_.result.ran = ever_active_;
    if (rank0()) write_outputs();
    if (cache_ && leader_) cache_->remove();
    return p_.result;
  }

 private:
  [[nodiscard]] bool rank0() const { return env_.rank == 0; }
  [[nodiscard]] bool active() const {
    const auto& r = plan_->layout.active_ranks;
    return std::find(r.begin(), r.end(), env_.rank) != r.end();
  }
  [[nodiscard]] const ReplicaLayout::Replica& replica() const {
    const auto& l = plan_->layout;
    const auto it = std::find(l.active_ranks.begin(), l.active_ranks.end(), env_.rank);
    return l.replica.at(static_cast<std::size_t>(it - l.active_ranks.begin()));
  }
  void log(const std::string& line) const {
    if (rank0() && opt_.log) opt_.log(line);
  }

  // ------------------------------------------------------------ planning

  // Chunk-search candidates are timed for real (rank 0, a few iterations
  // each, memoised per environment, K and batch); the others receive rank
  // 0's table. A plan's predicted throughput stays the cost model's.
  std::vector<IterationPrediction> predict(const std::vector<IterationSetup>& setups, PredictionUse use) {
    if (use == PredictionUse::Plan || setups.size() < 2 || c_.exec.chunk_search_iterations == 0)
      return analytic_(setups, use);
    const int K = setups.front().K;
    auto known = p_.chunk_times.find(K);
    if (known == p_.chunk_times.end()) {
      if (!rank0()) {
        if (pending_chunk_times_.empty())
          throw Error("rank " + std::to_string(env_.rank) + ": chunk search for K = " + std::to_string(K) +
                      ": no timing from rank 0");
        known = p_.chunk_times.emplace(K, pending_chunk_times_).first;
        return to_predictions(known->second, setups.size(), K);
      }
      std::vector<double> times = memoised_chunk_times(setups);
      if (times.empty()) {
        for (const auto& s : setups) times.push_back(time_iterations(s));
        memoise_chunk_times(setups, times);
      }
      known = p_.chunk_times.emplace(K, times).first;
    }
    return to_predictions(known->second, setups.size(), K);
  }

  static std::vector<IterationPrediction> to_predictions(const std::vector<double>& times, std::size_t n, int K) {
    if (times.size() != n)
      throw Error("chunk search for K = " + std::to_string(K) + ": " + std::to_string(times.size()) +
                  " timings for " + std::to_string(n) + " candidates");
    std::vector<IterationPrediction> out;
    for (const double t : times) out.push_back({t, 0});
    return out;
  }

  std::string environment() const {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    const auto& m = c_.model;
    return std::string(host) + "|" + std::to_string(cores_) + " cores|" + to_string(c_.exec.device) +
           "|libtorch " + TORCH_VERSION + "|" + to_string(m.family) + " L" + std::to_string(m.num_hidden_layers) +
           " H" + std::to_string(m.hidden_size) + " A" + std::to_string(m.num_attention_heads) + " I" +
           std::to_string(m.intermediate_size) +  " img" + std::to_string(m.image_size) + "/" + std::to_string(m.patch_size) + " seq" + std::to_string(m.seq_length) + "|" +
           to_string(c_.training.precision) + "|" + to_string(c_.training.checkpointing) + "|" +
           to_string(c_.planner.schedule) + " v" + std::to_string(c_.planner.virtual_stages) + "|" +
           std::to_string(c_.cluster.gpus_per_node) + " processes per node";
  }

  std::string memo_path() const {
    if (!c_.exec.chunk_memo.empty()) return c_.exec.chunk_memo;
    const char* home = std::getenv("HOME");
    return std::string(home && *home ? home : "/tmp") + "/.cache/elasticpipe/chunk_memo.json";
  }

  json memo_key(const std::vector<IterationSetup>& setups) const {
    std::vector<int> Ms;
    for (const auto& s : setups) Ms.push_back(s.M);
    return {{"environment", environment()}, {"K", setups.front().K}, {"batch", batch_}, {"M", Ms}};
  }

  std::vector<double> memoised_chunk_times(const std::vector<IterationSetup>& setups) const {
    std::ifstream in(memo_path());
    if (!in) return {};
    json memo;
    try {
      in >> memo;
    } catch (const std::exception& e) {
      throw Error("chunk memo " + memo_path() + ": not JSON (" + std::string(e.what()) +
                  "); delete it or set exec.chunk_memo");
    }
    const json key = memo_key(setups);
    for (const auto& e : memo.value("entries", json::array()))
      if (e.at("key") == key) return e.at("iteration_s").get<std::vector<double>>();
    return {};
  }

  void memoise_chunk_times(const std::vector<IterationSetup>& setups, const std::vector<double>& times) const {
    const std::string path = memo_path();
    json memo = {{"entries", json::array()}};
    if (std::ifstream in(path); in) {
      try {
        in >> memo;
      } catch (const std::exception&) {
        memo = {{"entries", json::array()}};
      }
    }
    memo["entries"].push_back({{"key", memo_key(setups)}, {"iteration_s", times}});
    create_output_dir(std::filesystem::path(path).parent_path().string());
    write_file_atomically(path, memo.dump(1) + "\n");
  }

  // Median of exec.chunk_search_iterations iterations (after one warm-up)
  // of one replica, without updating anything: no OptimizerStep, no
  // all-reduce (its buckets do not depend on M), the frozen prefix
  // recomputed (cache entries may not exist yet).
  double time_iterations(IterationSetup s) {
    s.replicas = 1;
    s.cache_on = false;
    s.cache_valid_layers = -1;
    pipeline_->set_cores(cores_ / plan_layout_ppn(s.K));
    pipeline_->configure(s.partition, s.K, s.v);
    ScheduleOptions o = schedule_options(ctx_, s);
    o.optimizer_step = false;
    const Schedule sched = build_schedule(o);
    std::vector<std::int64_t> idx;
    for (int i = 0; i < batch_; ++i) idx.push_back(i % data_.train.size);
    const std::vector<MicroBatch> mbs = split(idx, s.M);
    std::vector<double> t;
    for (int i = 0; i <= c_.exec.chunk_search_iterations; ++i) {
      const Clock::time_point t0 = Clock::now();
      (void)pipeline_->run(sched, mbs, batch_, 0);
      if (i > 0) t.push_back(seconds(t0, Clock::now()));
    }
    return median(t);
  }

  [[nodiscard]] int plan_layout_ppn(int K) const { return std::max(1, replica_layout(c_, K).pipelines_per_node); }

  std::vector<MicroBatch> split(const std::vector<std::int64_t>& idx, int M) const {
    std::vector<MicroBatch> mbs;
    std::size_t at = 0;
    for (const int n : micro_batch_sizes(static_cast<int>(idx.size()), M)) {
      mbs.push_back(make_batch(data_.train, {idx.begin() + at, idx.begin() + at + n}));
      at += n;
    }
    return mbs;
  }

  // Rank 0's measurement behind AutoCache's decision at `frozen` layers:
  // reading a batch of entries from a probe file in the tier's directory
  // vs running the batch through the frozen prefix.
  MeasuredCache measure_cache(int frozen) {
    const CacheDecision analytic = decide_cache(c_, ctx_.spec, cost_, frozen, batch_);
    MeasuredCache m;
    std::vector<std::int64_t> idx;
    for (int i = 0; i < batch_; ++i) idx.push_back(i % data_.train.size);
    const MicroBatch mb = make_batch(data_.train, idx);
    const at::Device dev = pipeline_->device_of_sublayer(0);
    at::NoGradGuard no_grad;
    std::vector<double> fz, rd;
    at::Tensor out;
    for (int i = 0; i < 3; ++i) {
      const Clock::time_point t0 = Clock::now();
      out = model_.forward(ModelSpec::frozen_prefix(frozen), mb.input.to(dev));
      if (dev.is_cuda()) compat::synchronize(dev);
      fz.push_back(seconds(t0, Clock::now()));
    }
    std::vector<std::int64_t> rows(idx.size());
    for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<std::int64_t>(i);
    ActivationCache probe(cache_path(analytic.tier, "probe-" + std::to_string(env_.rank)), batch_, entry_shape(),
                          true);
    probe.write(rows, out, frozen);
    for (int i = 0; i < 3; ++i) {
      const Clock::time_point t0 = Clock::now();
      (void)probe.read(rows, frozen, dev);
      rd.push_back(seconds(t0, Clock::now()));
    }
    probe.remove();
    m.read_s = median(rd);
    m.frozen_forward_s = median(fz);
    return m;
  }

  // Plans the next freeze step: rank 0 decides the frozen count (and times
  // what the plan needs), publishes it, and every process plans the same
  // step from the same inputs. Returns false at the end of training.
  bool plan_step(bool initial) {
    const std::string key = "step/" + std::to_string(planner_.run().plans.size());
    const Clock::time_point t0 = Clock::now();
    if (rank0()) {
      int frozen = 0;
      if (!initial) {
        std::vector<double> norms(L_, 0.0);
        for (int l = 0; l < L_; ++l)
          norms[l] = p_.interval_iterations ? p_.interval_norm_sum[l] / static_cast<double>(p_.interval_iterations) : 0;
        p_.result.grad_norms.push_back(norms);
        frozen = planner_.frozen_after(norms);  // the planner's freeze policy decides
      }
      if (frozen > 0 && c_.planner.autopipe && c_.planner.cache == CachePolicyKind::Auto &&
          !p_.cache_measurements.count(frozen))
        p_.cache_measurements[frozen] = measure_cache(frozen);
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

  // ------------------------------------------------------------ plans

  std::string cache_path(CacheTier tier, const std::string& name) const {
    const std::string dir = cache_dir(c_, tier, opt_.out_dir);
    create_output_dir(dir);
    return (std::filesystem::path(dir) / (cache_file_prefix(c_, opt_.out_dir) + name + ".cache")).string();
  }

  std::vector<std::int64_t> entry_shape() {
    if (entry_shape_.empty()) {
      at::NoGradGuard no_grad;
      const MicroBatch one = make_batch(data_.train, {0});
      const at::Tensor out = model_.forward({0, 1}, one.input.to(pipeline_->device_of_sublayer(0)));
      entry_shape_ = out.sizes().slice(1).vec();
    }
    return entry_shape_;
  }

  std::vector<at::Device> plan_devices() const {
    std::vector<at::Device> d = devices(c_);
    if (c_.exec.device != ExecDevice::CUDA || !active()) return d;
    const int visible = std::max<int>(1, static_cast<int>(at::getNumGPUs()));
    const auto& gpus = replica().gpus;  // stage -> global GPU id, AutoDP's layout
    for (std::size_t k = 0; k < gpus.size() && k < d.size(); ++k)
      d[k] = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(gpus[k] % c_.cluster.gpus_per_node % visible));
    return d;
  }

  // Carries out plan_ on this process: onboarding of woken replicas (from a
  // live one), repartition, the active group's rebuild, the node's cache
  // file, and a check that all replicas hold the same state.
  void enter_plan(TransitionCost* cost) {
    const bool was_active = previous_plan_ != nullptr &&
                            std::count(previous_plan_->layout.active_ranks.begin(),
                                       previous_plan_->layout.active_ranks.end(), env_.rank) > 0;
    Clock::time_point t = Clock::now();
    if (dist_ && previous_plan_) {
      const auto& old = previous_plan_->layout.active_ranks;
      const auto& woken = plan_->woken_ranks;
      for (std::size_t i = 0; i < woken.size(); ++i) {
        const int dst = woken[i], src = plan_->onboarding.at(i).source;  // the plan names the sender
        const int tag = static_cast<int>(plan_->id) * 4096 + dst;
        if (env_.rank == src) {
          const std::vector<std::uint8_t> bytes = pack_state(model_, optimizer_, to_json(p_));
          dist_->send_bytes(bytes, dst, tag, "training state (" + std::to_string(bytes.size()) + " bytes)");
        } else if (env_.rank == dst) {
          const std::vector<std::uint8_t> bytes = dist_->recv_bytes(src, tag, "training state");
          const json meta = unpack_state(bytes, model_, optimizer_, "state from rank " + std::to_string(src));
          Progress received = progress_from_json(meta);
          received.frozen_history = p_.frozen_history;  // planned here, in lockstep
          received.chunk_times.insert(p_.chunk_times.begin(), p_.chunk_times.end());
          p_ = std::move(received);
        }
      }
    }
    if (cost) cost->state_transfer_s = seconds(t, Clock::now());
    t = Clock::now();
    const bool now_active = active();
    if (now_active) {
      ever_active_ = true;
      pipeline_->set_devices(plan_devices());
      pipeline_->set_cores(std::max(1, cores_ / std::max(1, plan_->layout.pipelines_per_node)));
      compat::set_thread_count(std::max(1, cores_ / std::max(1, plan_->layout.pipelines_per_node)));
      pipeline_->configure(plan_->partition, plan_->K, plan_->v);
      schedule_ = build_schedule(schedule_options(ctx_, iteration_setup(c_, *plan_, false)));
      check_schedule(schedule_);
      if (plan_->cache_fill_from >= 0) {
        fill_schedule_ = build_schedule(schedule_options(ctx_, iteration_setup(c_, *plan_, true)));
        check_schedule(fill_schedule_);
      }
      // The node's first process creates the cache file before the group
      // rebuild (a barrier); the others open it after.
      if (plan_->cache.on && !cache_ && leader_) {
        cache_ = std::make_unique<ActivationCache>(cache_path(plan_->cache.tier, "node" + std::to_string(node_)),
                                                   data_.train.size, entry_shape(), true);
        if (resumed_) rebuild_cache();
      }
    }
    if (cost) cost->repartition_s = seconds(t, Clock::now());
    t = Clock::now();
    if (dist_ && (now_active || was_active)) dist_->rebuild_active(plan_->id, plan_->layout.active_ranks, plan_->K, plan_devices());
    if (cost) cost->rebuild_s = seconds(t, Clock::now());
    t = Clock::now();
    if (now_active) {
      if (plan_->cache.on && !cache_)
        cache_ = std::make_unique<ActivationCache>(cache_path(plan_->cache.tier, "node" + std::to_string(node_)),
                                                   data_.train.size, entry_shape(), false);
      pipeline_->set_cache(cache_.get());
      if (dist_ && plan_->layout.replicas > 1) check_replicas();
    }
    if (cost) cost->repartition_s += seconds(t, Clock::now());
    resumed_ = false;
  }

  // Every replica must hold bit-identical weights and optimizer state (the
  // CRC-32 that closes pack_state's bytes): gathered by a sum all-reduce of
  // a one-hot vector, compared on every rank.
  void check_replicas() {
    const std::vector<std::uint8_t> bytes = pack_state(model_, optimizer_, json::object());
    std::uint32_t crc = 0;
    std::memcpy(&crc, bytes.data() + bytes.size() - 4, 4);
    const auto& ranks = plan_->layout.active_ranks;
    const auto me = std::find(ranks.begin(), ranks.end(), env_.rank) - ranks.begin();
    at::Tensor all = at::zeros({static_cast<std::int64_t>(ranks.size())}, at::kLong);
    all[me] = static_cast<std::int64_t>(crc);
    dist_->allreduce_now(all, "replica state check");
    for (std::size_t i = 0; i < ranks.size(); ++i)
      if (all[static_cast<std::int64_t>(i)].item<std::int64_t>() != all[0].item<std::int64_t>())
        throw Error("rank " + std::to_string(env_.rank) + ": replica state differs after the transition to plan " +
                    std::to_string(plan_->id) + ": rank " + std::to_string(ranks[i]) + " holds crc " +
                    hex(all[static_cast<std::int64_t>(i)].item<std::int64_t>()) + ", rank " +
                    std::to_string(ranks[0]) + " " + hex(all[0].item<std::int64_t>()));
    char buf[160];
    std::snprintf(buf, sizeof buf, "replicas %zu hold identical weights and optimizer state (crc32 %08x)",
                  ranks.size(), crc);
    log(buf);
  }

  // After a resume the node's cache file is new: its leader recomputes
  // every entry the plan will read, at the depth the uninterrupted run
  // would hold (in a fill epoch, the slots consumed before the checkpoint
  // are already advanced).
  void rebuild_cache() {
    const Clock::time_point t0 = Clock::now();
    const std::vector<std::int64_t> order = node_order(sampler_, node_, p_.epoch);
    const bool fill = plan_->cache_role(p_.epoch) == CacheRole::Fill || plan_->cache_role(p_.epoch) == CacheRole::Advance;
    std::map<int, std::vector<std::int64_t>> by_depth;
    for (std::size_t j = 0; j < order.size(); ++j) {
      if (order[j] < 0) continue;
      const int depth = !fill || static_cast<std::int64_t>(j) < p_.consumed ? plan_->frozen_layers : plan_->cache_fill_from;
      if (depth > 0) by_depth[depth].push_back(order[j]);
    }
    at::NoGradGuard no_grad;
    const at::Device dev = pipeline_->device_of_sublayer(0);
    const int chunk = c_.exec.eval_batch_size > 0 ? c_.exec.eval_batch_size : batch_;
    for (auto& [depth, idx] : by_depth) {
      std::sort(idx.begin(), idx.end());
      for (std::size_t at = 0; at < idx.size(); at += chunk) {
        const std::vector<std::int64_t> part(idx.begin() + at, idx.begin() + std::min(idx.size(), at + chunk));
        const MicroBatch mb = make_batch(data_.train, part);
        cache_->write(part, model_.forward(ModelSpec::frozen_prefix(depth), mb.input.to(dev)), depth);
      }
    }
    char buf[128];
    std::snprintf(buf, sizeof buf, "node %d: cache rebuilt after resume (%.2f s)", node_, seconds(t0, Clock::now()));
    log(buf);
  }

  void transition() {
    const Clock::time_point t0 = Clock::now();
    const int frozen_before = plan_->frozen_layers, K_before = plan_->K, replicas_before = plan_->layout.replicas;
    plan_step(false);
    TransitionCost cost;
    cost.epoch = p_.epoch;
    cost.planning_s = planning_s_;
    enter_plan(&cost);
    std::fill(p_.interval_norm_sum.begin(), p_.interval_norm_sum.end(), 0.0);
    p_.interval_iterations = 0;
    cost.frozen_before = frozen_before;
    cost.frozen_after = plan_->frozen_layers;
    cost.K_before = K_before;
    cost.K_after = plan_->K;
    cost.replicas_before = replicas_before;
    cost.replicas_after = plan_->layout.replicas;
    const bool moved = plan_->frozen_layers != frozen_before || plan_->K != K_before;
    const Clock::time_point t1 = Clock::now();
    pending_transition_s_ = seconds(t0, t1);
    if (moved) {
      tb_.transition(seconds(origin_, t0), seconds(origin_, t1), p_.epoch,
                     "transition frozen " + std::to_string(frozen_before) + "->" +
                         std::to_string(plan_->frozen_layers) + " K " + std::to_string(K_before) + "->" +
                         std::to_string(plan_->K) + " replicas " + std::to_string(replicas_before) + "->" +
                         std::to_string(plan_->layout.replicas));
      p_.result.transitions.push_back(cost);
      measure_warmup_ = true;
      char buf[320];
      std::snprintf(buf, sizeof buf,
                    "transition frozen %d->%d K %d->%d replicas %d->%d (%.3f s: planning %.3f, state transfer %.3f, "
                    "group rebuild %.3f, repartition %.3f)",
                    frozen_before, plan_->frozen_layers, K_before, plan_->K, replicas_before, plan_->layout.replicas,
                    pending_transition_s_, cost.planning_s, cost.state_transfer_s, cost.rebuild_s, cost.repartition_s);
      log(buf);
    }
  }

  // ------------------------------------------------------------ epochs

  // The lr schedule's position, in iterations of the initial plan: with
  // more replicas an iteration covers more samples, so the schedule follows
  // the samples seen, not the step count.
  // Iterations per epoch of the initial plan: the lr schedule's unit.
  [[nodiscard]] std::int64_t per_epoch0() const { return planner_.run().plans.front().iterations_per_epoch; }

  [[nodiscard]] std::int64_t lr_position() const {
    const int ppn0 = planner_.run().plans.front().layout.pipelines_per_node;
    return static_cast<std::int64_t>(p_.epoch) * per_epoch0() + p_.consumed / (static_cast<std::int64_t>(ppn0) * batch_);
  }

  void run_epoch() {
    const int ppn = plan_->layout.pipelines_per_node;
    const int local = replica().local_rank;
    const bool fill = plan_->cache_role(p_.epoch) == CacheRole::Fill || plan_->cache_role(p_.epoch) == CacheRole::Advance;
    const Schedule& sched = fill ? fill_schedule_ : schedule_;
    const std::vector<std::int64_t> order = node_order(sampler_, node_, p_.epoch);
    const std::int64_t total0 = per_epoch0() * c_.training.epochs;
    const bool prefetch = plan_->cache.on && !fill && plan_->cache.tier == CacheTier::Disk && cache_;
    const std::int64_t slot_step = static_cast<std::int64_t>(ppn) * batch_;
    // The audit log grows by appending (a kill keeps what it holds); a write
    // it loses is an error, not a silently shorter file.
    std::unique_ptr<std::ofstream> samples;
    std::string samples_path;
    if (c_.exec.record_samples && !opt_.out_dir.empty()) {
      const auto dir = std::filesystem::path(opt_.out_dir) / "samples";
      create_output_dir(dir.string());
      samples_path = (dir / ("rank" + std::to_string(env_.rank) + ".csv")).string();
      samples = std::make_unique<std::ofstream>(samples_path, std::ios::app);
    }
    Traced traced;
    std::vector<double> first_iterations;
    const Clock::time_point epoch_start = Clock::now();
    const std::int64_t n = iterations_in_epoch(sampler_, p_.consumed, ppn, batch_);
    std::int64_t done = 0;
    const int every = c_.exec.checkpoint_every;
    for (; p_.consumed < static_cast<std::int64_t>(order.size()); ++done) {
      const Clock::time_point it0 = Clock::now();
      const std::vector<std::int64_t> idx = replica_batch(order, p_.consumed, ppn, local, batch_);
      if (prefetch)  // the sampler's next window, read ahead by the kernel
        for (int w = 1; w <= c_.exec.prefetch_iterations; ++w)
          if (p_.consumed + w * slot_step < static_cast<std::int64_t>(order.size()))
            cache_->prefetch(replica_batch(order, p_.consumed + w * slot_step, ppn, local, batch_));
      const std::vector<MicroBatch> mbs = split(idx, plan_->M);
      const auto global_real = iteration_real_samples(sampler_, p_.consumed, ppn, batch_);
      const double lr = learning_rate(c_.training, lr_position(), total0) * plan_->lr_scale;
      const bool trace_it = rank0() && p_.iteration < c_.exec.trace_iterations;
      const IterationResult r =
          pipeline_->run(sched, mbs, static_cast<double>(global_real), lr, fill ? plan_->cache_fill_from : -1,
                         trace_it ? std::optional<Clock::time_point>(origin_) : std::nullopt);
      if (trace_it) {
        tb_.add(r, *plan_, p_.epoch, static_cast<int>(p_.iteration));
        traced.add(r, plan_->K);
      }
      double loss = r.loss, correct = static_cast<double>(r.correct);
      if (dist_ && plan_->layout.replicas > 1) {  // the global batch's loss and hits
        at::Tensor t = at::tensor({loss, correct}, at::kDouble);
        dist_->allreduce_now(t, "loss all-reduce");
        loss = t[0].item<double>();
        correct = t[1].item<double>();
      }
      check_finite(loss, r.layer_grad_sq, lr);  // before anything records the iteration
      if (samples)
        for (const auto i : idx)
          if (i >= 0) *samples << p_.epoch << ',' << p_.consumed << ',' << i << '\n';
      p_.result.iteration_losses.push_back(loss);
      p_.epoch_loss_sum += loss * static_cast<double>(global_real);
      p_.epoch_real += global_real;
      p_.epoch_correct += static_cast<std::int64_t>(std::llround(correct));
      for (int l = 0; l < L_ && !r.layer_grad_sq.empty(); ++l) p_.interval_norm_sum[l] += std::sqrt(r.layer_grad_sq[l]);
      ++p_.interval_iterations;
      p_.consumed += slot_step;
      ++p_.iteration;
      if (measure_warmup_) {
        first_iterations.push_back(seconds(it0, Clock::now()));
        if (first_iterations.size() == 6 || p_.consumed >= static_cast<std::int64_t>(order.size())) {
          const double first = first_iterations.front();
          first_iterations.erase(first_iterations.begin());
          p_.result.transitions.back().warmup_s = std::max(0.0, first - median(first_iterations));
          measure_warmup_ = false;
        }
      }
      if (opt_.progress && rank0()) opt_.progress(static_cast<double>(done + 1) / static_cast<double>(n));
      if (every > 0 && p_.iteration % every == 0 && p_.consumed < static_cast<std::int64_t>(order.size())) {
        checkpoint(seconds(epoch_start, Clock::now()));
      }
    }
    if (samples && !samples->flush()) throw Error(samples_path + ": write failed (the sample audit is incomplete)");
    const double epoch_s = p_.epoch_elapsed_s + seconds(epoch_start, Clock::now());
    const double transition_s = pending_transition_s_;
    pending_transition_s_ = 0;
    p_.train_s += epoch_s + transition_s;

    trace::EpochMetrics m;
    m.source = "exec";
    m.mode = "train";
    m.epoch = p_.epoch;
    m.plan_id = plan_->id;
    m.frozen_layers = plan_->frozen_layers;
    m.K = plan_->K;
    m.M = plan_->M;
    m.replicas = plan_->layout.replicas;
    m.cache = plan_->cache.on;
    m.epoch_s = epoch_s + transition_s;
    m.iteration_s = p_.iteration ? epoch_s / static_cast<double>(p_.iteration) : 0;
    m.samples_per_s = epoch_s > 0 ? static_cast<double>(p_.epoch_real) / epoch_s : 0;
    m.bubble_fraction = traced.iterations ? traced.bubble / traced.iterations : 0;
    m.compute_s = traced.iterations ? traced.compute_s / traced.iterations : 0;
    m.comm_s = traced.iterations ? traced.comm_s / traced.iterations : 0;
    m.cache_hit_ratio = plan_->cache.on && !fill ? 1 : 0;
    m.transition_s = transition_s;
    m.loss = p_.epoch_real ? p_.epoch_loss_sum / static_cast<double>(p_.epoch_real) : 0;
    m.accuracy = evaluate();
    p_.result.epochs.push_back(m);
    log(format_epoch(m, c_.training.epochs, L_));
    ++p_.epoch;
    p_.consumed = 0;
    p_.iteration = 0;
    p_.epoch_loss_sum = 0;
    p_.epoch_real = p_.epoch_correct = 0;
    p_.epoch_elapsed_s = 0;
    // Rewritten every epoch: a run that fails later keeps what it measured.
    if (rank0() && !opt_.out_dir.empty())
      write_epoch_csv(p_.result.epochs, (std::filesystem::path(opt_.out_dir) / "epochs.csv").string());
    checkpoint();
  }

  // A diverged run stops here, before its loss, its gradient norms (which
  // would drive the freeze policy) or a checkpoint of its state are kept:
  // the checkpoints on disk are all of finite states from before, and the
  // message names them.
  void check_finite(double loss, const std::vector<double>& layer_grad_sq, double lr) const {
    std::string what;
    if (!std::isfinite(loss)) what = "loss " + std::to_string(loss);
    for (std::size_t l = 0; what.empty() && l < layer_grad_sq.size(); ++l)
      if (!std::isfinite(layer_grad_sq[l]))
        what = "gradient norm of layer " + std::to_string(l) + " " + std::to_string(std::sqrt(layer_grad_sq[l]));
    char lr_text[32];
    std::snprintf(lr_text, sizeof lr_text, "%g", lr);
    if (!what.empty()) diverged(p_.iteration + 1, what + " (learning rate " + lr_text + ")");
  }

  // A finite loss can still leave non-finite weights after the step.
  void check_finite_weights() const {
    for (const NamedTensor& p : model_.named_params())
      if (!at::isfinite(p.tensor).all().item<bool>()) diverged(p_.iteration, "parameter " + p.name + " is not finite");
  }

  [[noreturn]] void diverged(std::int64_t iteration, const std::string& what) const {
    const std::filesystem::path checkpoints = std::filesystem::path(opt_.out_dir) / "checkpoints";
    std::error_code ec;
    const bool have = !opt_.out_dir.empty() && std::filesystem::exists(checkpoints / "latest", ec);
    throw Error("training diverged at epoch " + std::to_string(p_.epoch + 1) + ", iteration " +
                std::to_string(iteration) + ": " + what + "; " +
                (have ? "the last good checkpoint is " + checkpoints.string() + ": continue with --resume " +
                            checkpoints.string() + " and a smaller training.lr"
                      : std::string("no checkpoint was written before it: start again with a smaller training.lr")));
  }

  // The active replicas split the test set; the hits are summed.
  double evaluate() {
    const Dataset& test = data_.test;
    if (test.size == 0) return -1;
    const auto& ranks = plan_->layout.active_ranks;
    const auto n = static_cast<std::int64_t>(ranks.size());
    const auto me = static_cast<std::int64_t>(std::find(ranks.begin(), ranks.end(), env_.rank) - ranks.begin());
    const std::int64_t block = (test.size + n - 1) / n;
    const std::int64_t lo = std::min(test.size, me * block), hi = std::min(test.size, lo + block);
    const int batch = c_.exec.eval_batch_size > 0 ? c_.exec.eval_batch_size : batch_;
    const int threads = at::get_num_threads();
    compat::set_thread_count(std::max(1, cores_ / std::max<int>(1, static_cast<int>(n))));
    double correct = 0;
    for (std::int64_t first = lo; first < hi; first += batch) {
      std::vector<std::int64_t> idx;
      for (std::int64_t i = first; i < std::min(hi, first + batch); ++i) idx.push_back(i);
      const MicroBatch mb = make_batch(test, idx);
      const at::Tensor logits = pipeline_->infer(mb.input);
      correct += static_cast<double>((logits.argmax(-1).cpu() == mb.labels).sum().item<std::int64_t>());
    }
    compat::set_thread_count(threads);
    if (dist_ && n > 1) {
      at::Tensor t = at::tensor({correct}, at::kDouble);
      dist_->allreduce_now(t, "evaluation all-reduce");
      correct = t[0].item<double>();
    }
    return correct / static_cast<double>(test.size);
  }

  // ------------------------------------------------------------ checkpoints

  // `running_s`: the open epoch's time since this process started it (a
  // resumed run adds it to what the checkpoint holds).
  void checkpoint(double running_s = 0) {
    if (!rank0() || opt_.out_dir.empty()) return;
    check_finite_weights();  // a checkpoint is only ever of a state worth resuming
    json progress = to_json(p_);
    progress["epoch_elapsed_s"] = p_.epoch_elapsed_s + running_s;
    const json meta = {{"fingerprint", fingerprint(c_)},
                       {"progress", progress},
                       {"replicas", plan_->layout.replicas},
                       {"processes", env_.world_size}};
    write_checkpoint((std::filesystem::path(opt_.out_dir) / "checkpoints").string(),
                     static_cast<std::int64_t>(p_.result.iteration_losses.size()),
                     pack_state(model_, optimizer_, meta), c_.exec.checkpoint_keep);
  }

  void resume() {
    const LoadedCheckpoint ck = read_checkpoint(opt_.resume);
    const json meta = peek_meta(ck.state, ck.path);
    if (!meta.contains("fingerprint") || !meta.contains("progress"))
      throw Error("checkpoint " + ck.path + " has no training progress: not an elasticpipe train checkpoint");
    check_fingerprint(meta.at("fingerprint"), c_, ck.path);
    (void)unpack_state(ck.state, model_, optimizer_, ck.path);
    p_ = progress_from_json(meta.at("progress"));
    // The same plans as the interrupted run: its frozen counts, chunk
    // timings and cache measurements, replayed through the RunPlanner.
    for (const int frozen : p_.frozen_history) {
      if (const auto it = p_.cache_measurements.find(frozen); it != p_.cache_measurements.end())
        planner_.measured_cache(frozen, it->second);
      planner_.next(frozen);
    }
    plan_storage_ = planner_.run().plans.back();
    plan_ = &plan_storage_;
    resumed_ = true;
    char buf[200];
    std::snprintf(buf, sizeof buf, "resumed from %s: epoch %d, iteration %lld, frozen %d, %d replicas (saved with %d)",
                  ck.path.c_str(), p_.epoch + 1, static_cast<long long>(p_.iteration), plan_->frozen_layers,
                  plan_->layout.replicas, meta.value("replicas", 0));
    log(buf);
  }

  // ------------------------------------------------------------ outputs

  void init_trace() {
    tb_.device_prefix = c_.exec.device == ExecDevice::CUDA ? "gpu" : "cpu";
    tb_.trace.source = "exec";
    tb_.trace.config = c_.source;
    tb_.trace.mode = "train";
    tb_.trace.metadata = describe(c_);
    tb_.trace.metadata["device"] = to_string(c_.exec.device);
    tb_.trace.metadata["threads_per_worker"] =
        c_.exec.threads_per_worker > 0 ? std::to_string(c_.exec.threads_per_worker)
                                       : "cores/(K x pipelines per node), " + std::to_string(cores_) + " cores";
    tb_.trace.metadata["libtorch"] = TORCH_VERSION;
    tb_.trace.metadata["processes"] = std::to_string(env_.world_size);
    tb_.trace.metadata["launcher"] = env_.launcher;
    tb_.trace.metadata["batch_policy"] = to_string(c_.training.batch_policy);
  }

  // Every file written before any is renamed into place: a failure (a full
  // disk) leaves the previous run's set, never a mix or a partial file.
  void write_outputs() {
    if (opt_.out_dir.empty()) return;
    const std::filesystem::path out(opt_.out_dir);
    const auto file = [&](const char* name) { return (out / name).string(); };
    AtomicFile trace(file("trace.json")), summary_file(file("summary.json")), grad_norms(file("grad_norms.csv")),
        plan(file("plan.json")), transitions_file(file("transitions.json")), iterations(file("iterations.csv")),
        weights(file("weights.bin"));
    write_chrome_trace(tb_.trace, trace.stream(), trace.path());
    trace::RunSummary summary;
    summary.source = "exec";
    summary.config = c_.source;
    summary.metadata = tb_.trace.metadata;
    trace::ModeSummary mode;
    mode.mode = "train";
    mode.total_s = p_.result.total_s;
    mode.samples_per_s = static_cast<double>(data_.train.size) * c_.training.epochs / std::max(1e-9, p_.result.total_s);
    mode.final_accuracy = p_.result.final_accuracy;
    for (const auto& e : p_.result.epochs) mode.epoch_s.push_back(e.epoch_s);
    summary.modes.push_back(mode);
    write_summary_json(summary, summary_file.stream(), summary_file.path());
    grad_norms.write_with([&](const std::string& temp) { write_grad_norm_trace(GradNormTrace{p_.result.grad_norms}, temp); });
    plan.stream() << ep::to_json(planner_.run(), planner_.context().spec).dump(2) << '\n';
    json transitions = json::array();
    for (const auto& t : p_.result.transitions) transitions.push_back(to_json(t));
    transitions_file.stream() << transitions.dump(2) << '\n';
    iterations.stream() << "iteration,loss\n";
    char buf[64];
    for (std::size_t i = 0; i < p_.result.iteration_losses.size(); ++i) {
      std::snprintf(buf, sizeof buf, "%zu,%.9g\n", i, p_.result.iteration_losses[i]);
      iterations.stream() << buf;
    }
    weights.write_with([&](const std::string& temp) { model_.save(temp); });
    commit_together({&trace, &summary_file, &grad_norms, &plan, &transitions_file, &iterations, &weights});
  }

  const Config& c_;
  const TrainOptions& opt_;
  ProcessEnv env_;
  Data data_;
  int L_, batch_;
  AnalyticCostModel cost_;
  PlanContext ctx_;
  IterationPredictor analytic_;
  RunPlanner planner_;
  Model model_;
  Optimizer optimizer_;
  SamplerSpec sampler_;
  int node_;
  bool leader_;
  int cores_;
  std::unique_ptr<Dist> dist_;
  std::unique_ptr<Pipeline> pipeline_;
  std::unique_ptr<ActivationCache> cache_;
  std::vector<std::int64_t> entry_shape_;
  Plan plan_storage_, prev_storage_;
  const Plan* plan_ = nullptr;
  const Plan* previous_plan_ = nullptr;
  Schedule schedule_, fill_schedule_;
  Progress p_;
  std::vector<double> pending_chunk_times_;
  double planning_s_ = 0, pending_transition_s_ = 0;
  bool measure_warmup_ = false, resumed_ = false, ever_active_ = false;
  TraceBuilder tb_;
  Clock::time_point origin_ = Clock::now();
};

}  // namespace

std::string format_epoch(const trace::EpochMetrics& m, int epochs, int L) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "epoch %d/%d  loss %.4f  acc %s  frozen %d/%d  K %d  M %d  %s%.0f samples/s%s",
                m.epoch + 1, epochs, m.loss,
                m.accuracy < 0 ? "n/a" : (std::to_string(std::round(m.accuracy * 10000) / 100).substr(0, 5) + "%").c_str(),
                m.frozen_layers, L, m.K, m.M, m.replicas > 1 ? ("x" + std::to_string(m.replicas) + "  ").c_str() : "",
                m.samples_per_s, m.cache ? "  cache" : "");
  return buf;
}

std::vector<std::string> cache_file_names(const Config& c, const std::string& out_dir, int rank) {
  const std::string prefix = cache_file_prefix(c, out_dir);
  std::vector<std::string> out;
  for (const CacheTier tier : {CacheTier::HostMemory, CacheTier::Disk})
    for (const std::string& name :
         {"node" + std::to_string(rank / c.cluster.gpus_per_node), "probe-" + std::to_string(rank)})
      out.push_back((std::filesystem::path(cache_dir(c, tier, out_dir)) / (prefix + name + ".cache")).string());
  return out;
}

std::vector<std::string> remove_cache_files(const Config& c, const std::string& out_dir) {
  std::vector<std::string> removed;
  const std::string prefix = cache_file_prefix(c, out_dir);
  for (const CacheTier tier : {CacheTier::HostMemory, CacheTier::Disk}) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(cache_dir(c, tier, out_dir), ec)) {
      const std::string name = entry.path().filename().string();
      if (name.starts_with(prefix) && name.ends_with(".cache") && std::filesystem::remove(entry.path(), ec))
        removed.push_back(entry.path().string());
    }
  }
  return removed;
}

TrainResult train(const Config& c, const TrainOptions& opt) {
  check_runnable(c, opt.process);
  Trainer trainer(c, opt);
  return trainer.run();
}

}  // namespace ep::exec
