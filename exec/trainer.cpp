#include "exec/trainer.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <fstream>
#include <thread>

#include "exec/cache.hpp"
#include "exec/data.hpp"
#include "exec/model.hpp"
#include "exec/optimizer.hpp"
#include "exec/pipeline.hpp"
#include "exec/torch_compat.hpp"
#include "planner/freeze.hpp"
#include "planner/run_plan.hpp"

namespace ep::exec {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// What one process cannot run, refused before any work.
void check_runnable(const Config& c) {
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
  // Every K a plan can reach: K0, and its halvings when AutoPipe compresses.
  const bool compresses = c.planner.autopipe && c.planner.compression != CompressionKind::None;
  for (int K = c.planner.K; K >= 1; K = compresses ? K / 2 : 0) {
    const ReplicaLayout layout = replica_layout(c, K);
    if (layout.replicas > 1)
      throw c.error(c.planner.autodp ? "planner.autodp" : "planner.K",
                    "one pipeline replica at every K (one process trains one pipeline; data parallelism "
                    "across processes is `train --nproc`, not built yet): planner.autodp = false and "
                    "planner.K = all " + std::to_string(c.cluster.total_gpus()) + " devices",
                    std::to_string(layout.replicas) + " replicas at K = " + std::to_string(K));
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

double evaluate(Pipeline& pipeline, const Dataset& test, int batch) {
  if (test.size == 0) return -1;
  std::int64_t correct = 0;
  for (std::int64_t first = 0; first < test.size; first += batch) {
    std::vector<std::int64_t> idx;
    for (std::int64_t i = first; i < std::min(test.size, first + batch); ++i) idx.push_back(i);
    const MicroBatch mb = make_batch(test, idx);
    const at::Tensor logits = pipeline.infer(mb.input);
    correct += (logits.argmax(-1).cpu() == mb.labels).sum().item<std::int64_t>();
  }
  return static_cast<double>(correct) / static_cast<double>(test.size);
}

std::vector<at::Device> devices(const Config& c) {
  std::vector<at::Device> d;
  const int K0 = c.planner.K;
  const int gpus = c.exec.device == ExecDevice::CUDA ? std::max<int>(1, static_cast<int>(at::getNumGPUs())) : 1;
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
// the bubble (1 − F/B time / (K · makespan)).
struct Traced {
  double compute_s = 0, bubble = 0;
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
    compute_s += busy / K;
    bubble += hi > lo ? 1 - fb / (K * (hi - lo)) : 0;
    ++iterations;
  }
};

}  // namespace

std::string format_epoch(const trace::EpochMetrics& m, int epochs, int L) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "epoch %d/%d  loss %.4f  acc %s  frozen %d/%d  K %d  M %d  %.0f samples/s%s",
                m.epoch + 1, epochs, m.loss,
                m.accuracy < 0 ? "n/a" : (std::to_string(std::round(m.accuracy * 10000) / 100).substr(0, 5) + "%").c_str(),
                m.frozen_layers, L, m.K, m.M, m.samples_per_s, m.cache ? "  cache" : "");
  return buf;
}

TrainResult train(const Config& c, const TrainOptions& opt) {
  check_runnable(c);
  const auto log = [&](const std::string& line) {
    if (opt.log) opt.log(line);
  };
  if (!opt.out_dir.empty()) std::filesystem::create_directories(opt.out_dir);
  const Data data = load_data(c);
  const int L = c.model.num_hidden_layers;
  const int batch = c.training.batch_size;

  const AnalyticCostModel cost(c.cluster, c.training);
  RunPlanner planner(c, cost);
  const std::unique_ptr<FreezePolicy> policy = make_freeze_policy(c);
  Model model(c.model, c.training.seed);
  exec::Optimizer optimizer(c.training);
  const std::vector<at::Device> devs = devices(c);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  PipelineOptions po{devs, c.exec.threads_per_worker, c.training.precision == Precision::BF16,
                     c.training.checkpointing};
  Pipeline pipeline(model, optimizer, po);
  compat::set_thread_count(cores);  // evaluation runs on this thread

  const SamplerSpec sampler{data.train.size, 1, c.training.seed};
  const std::int64_t per_epoch = iterations_in_epoch(sampler, 0, 1, batch);
  const std::int64_t total_steps = per_epoch * c.training.epochs;
  std::unique_ptr<ActivationCache> cache;

  TraceBuilder tb;
  tb.device_prefix = c.exec.device == ExecDevice::CUDA ? "gpu" : "cpu";
  tb.trace.source = "exec";
  tb.trace.config = c.source;
  tb.trace.mode = "train";
  tb.trace.metadata = describe(c);
  tb.trace.metadata["device"] = to_string(c.exec.device);
  tb.trace.metadata["threads_per_worker"] = po.threads_per_worker > 0 ? std::to_string(po.threads_per_worker)
                                                                      : "cores/K, " + std::to_string(cores) + " cores";
  tb.trace.metadata["libtorch"] = TORCH_VERSION;

  TrainResult result;
  const Clock::time_point origin = Clock::now();
  std::vector<double> interval_norm_sum(L, 0.0);
  std::int64_t interval_iterations = 0;
  std::int64_t step = 0;
  double train_time = 0;

  const Plan* plan = &planner.next(0);
  Schedule schedule, fill_schedule;
  const auto apply = [&](const Plan& p) {
    pipeline.configure(p.partition, p.K, p.v);
    schedule = build_schedule(schedule_options(planner.context(), iteration_setup(c, p, false)));
    check_schedule(schedule);
    if (p.cache_fill_from >= 0) {
      fill_schedule = build_schedule(schedule_options(planner.context(), iteration_setup(c, p, true)));
      check_schedule(fill_schedule);
    }
    if (p.cache.on) {
      if (p.cache.tier != CacheTier::HostMemory)
        throw Error("plan " + std::to_string(p.id) + " puts the activation cache on disk (" + p.cache.reason +
                    "); this executor keeps it in host memory only: raise cluster.host.memory_bytes or set "
                    "planner.cache = \"off\"");
      if (!cache) cache = std::make_unique<ActivationCache>(data.train.size);
      pipeline.set_cache(cache.get());
    }
  };
  apply(*plan);

  for (int epoch = 0; epoch < c.training.epochs; ++epoch) {
    double transition_s = 0;
    if (epoch == plan->end_epoch) {  // freeze step T
      const Clock::time_point t0 = Clock::now();
      std::vector<double> norms(L, 0.0);
      for (int l = 0; l < L; ++l) norms[l] = interval_iterations ? interval_norm_sum[l] / interval_iterations : 0;
      result.grad_norms.push_back(norms);
      const int T = plan->freeze_step + 1;
      const int frozen = policy->next(T, plan->frozen_layers, policy->needs_grad_norms() ? norms : std::vector<double>{});
      const int K_before = plan->K, frozen_before = plan->frozen_layers;
      plan = &planner.next(frozen);
      apply(*plan);
      std::fill(interval_norm_sum.begin(), interval_norm_sum.end(), 0.0);
      interval_iterations = 0;
      const Clock::time_point t1 = Clock::now();
      transition_s = seconds(t0, t1);
      const std::string what = "transition frozen " + std::to_string(frozen_before) + "->" +
                               std::to_string(plan->frozen_layers) + " K " + std::to_string(K_before) + "->" +
                               std::to_string(plan->K);
      if (plan->frozen_layers != frozen_before || plan->K != K_before) {  // else nothing moved
        tb.transition(seconds(origin, t0), seconds(origin, t1), epoch, what);
        char buf[160];
        std::snprintf(buf, sizeof buf, "%s (%.3f s)", what.c_str(), transition_s);
        log(buf);
      }
    }
    const bool fill = plan->cache_fill_from >= 0 && epoch == plan->first_epoch;
    const Schedule& sched = fill ? fill_schedule : schedule;
    const std::vector<int> sizes = micro_batch_sizes(batch, plan->M);
    const std::vector<std::int64_t> order = node_order(sampler, 0, epoch);
    double loss_sum = 0;
    std::int64_t real_total = 0, correct = 0;
    Traced traced;
    const Clock::time_point epoch_start = Clock::now();
    for (std::int64_t it = 0; it < per_epoch; ++it) {
      const std::vector<std::int64_t> idx = replica_batch(order, it * batch, 1, 0, batch);
      std::vector<MicroBatch> mbs;
      std::size_t at = 0;
      for (const int n : sizes) {
        mbs.push_back(make_batch(data.train, {idx.begin() + at, idx.begin() + at + n}));
        at += n;
      }
      const auto real = std::count_if(idx.begin(), idx.end(), [](std::int64_t i) { return i >= 0; });
      const double lr = learning_rate(c.training, step++, total_steps);
      const bool trace_it = it < c.exec.trace_iterations;
      const IterationResult r = pipeline.run(sched, mbs, static_cast<double>(real), lr,
                                             fill ? plan->cache_fill_from : -1,
                                             trace_it ? std::optional<Clock::time_point>(origin) : std::nullopt);
      if (trace_it) {
        tb.add(r, *plan, epoch, static_cast<int>(it));
        traced.add(r, plan->K);
      }
      result.iteration_losses.push_back(r.loss);
      loss_sum += r.loss * static_cast<double>(real);
      real_total += real;
      correct += r.correct;
      for (int l = 0; l < L && !r.layer_grad_sq.empty(); ++l) interval_norm_sum[l] += std::sqrt(r.layer_grad_sq[l]);
      ++interval_iterations;
      if (opt.progress) opt.progress(static_cast<double>(it + 1) / static_cast<double>(per_epoch));
    }
    const double epoch_s = seconds(epoch_start, Clock::now());
    train_time += epoch_s + transition_s;
    const int eval_batch = c.exec.eval_batch_size > 0 ? c.exec.eval_batch_size : batch;

    trace::EpochMetrics m;
    m.source = "exec";
    m.mode = "train";
    m.epoch = epoch;
    m.plan_id = plan->id;
    m.frozen_layers = plan->frozen_layers;
    m.K = plan->K;
    m.M = plan->M;
    m.replicas = plan->layout.replicas;
    m.cache = plan->cache.on;
    m.epoch_s = epoch_s + transition_s;
    m.iteration_s = epoch_s / static_cast<double>(per_epoch);
    m.samples_per_s = static_cast<double>(real_total) / epoch_s;
    m.bubble_fraction = traced.iterations ? traced.bubble / traced.iterations : 0;
    m.compute_s = traced.iterations ? traced.compute_s / traced.iterations : 0;
    m.cache_hit_ratio = plan->cache.on && !fill ? 1 : 0;
    m.transition_s = transition_s;
    m.loss = real_total ? loss_sum / static_cast<double>(real_total) : 0;
    m.accuracy = evaluate(pipeline, data.test, eval_batch);
    result.epochs.push_back(m);
    log(format_epoch(m, c.training.epochs, L));
    // Rewritten every epoch: a run that fails later keeps what it measured.
    if (!opt.out_dir.empty()) write_epoch_csv(result.epochs, (std::filesystem::path(opt.out_dir) / "epochs.csv").string());
  }
  result.total_s = train_time;
  result.final_accuracy = result.epochs.empty() ? -1 : result.epochs.back().accuracy;

  if (!opt.out_dir.empty()) {
    const std::filesystem::path out(opt.out_dir);
    write_chrome_trace(tb.trace, (out / "trace.json").string());
    trace::RunSummary summary;
    summary.source = "exec";
    summary.config = c.source;
    summary.metadata = tb.trace.metadata;
    trace::ModeSummary mode;
    mode.mode = "train";
    mode.total_s = result.total_s;
    mode.samples_per_s = static_cast<double>(data.train.size) * c.training.epochs / result.total_s;
    mode.final_accuracy = result.final_accuracy;
    for (const auto& e : result.epochs) mode.epoch_s.push_back(e.epoch_s);
    summary.modes.push_back(mode);
    write_summary_json(summary, (out / "summary.json").string());
    write_grad_norm_trace(GradNormTrace{result.grad_norms}, (out / "grad_norms.csv").string());
    std::ofstream plans(out / "plan.json");
    plans << to_json(planner.run(), planner.context().spec).dump(2) << '\n';
    model.save((out / "weights.bin").string());
  }
  return result;
}

}  // namespace ep::exec
