#include "exec/profiler.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "exec/blas.hpp"
#include "exec/cache.hpp"
#include "exec/dist.hpp"
#include "exec/exec_config.hpp"
#include "exec/job.hpp"
#include "exec/measure.hpp"
#include "exec/model.hpp"
#include "exec/optimizer.hpp"
#include "exec/pipeline.hpp"
#include "exec/progress.hpp"
#include "exec/replica_run.hpp"
#include "exec/state.hpp"
#include "exec/timing.hpp"
#include "exec/torch_compat.hpp"
#include "planner/autopipe.hpp"
#include "planner/cost_model.hpp"
#include "planner/error.hpp"
#include "planner/transition.hpp"
#include "planner/freeze.hpp"

namespace ep::exec {
namespace {

// Where training runs: the first device of exec.device, refused when this
// process cannot use it (never timed elsewhere instead).
at::Device profiled_device(const Config& c) {
  return check_device(c) > 0 ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
}

// Sublayers of one kind timed as a chain of up to kChain of them (attention
// of layers 0, 1, 2, ..., skipping the MLPs between; the shapes agree), per
// sublayer the chain's time over its length: a lone sublayer's time on a
// GPU holds the start-up of its launches and of autograd, which a training
// iteration pays once, not per sublayer (seen on an H200: lone sublayers
// added up to 12% more than the iteration they make up).
constexpr int kChain = 4;

struct ChainTimes {
  double forward = 0, backward = 0, frozen_forward = 0, forward_again = 0;
  double backward_input = 0;  // the input's gradient alone (timed where asked)
  // The host's and the device's share of forward and backward, as timed
  // (not divided per sublayer: the profile log gives the whole chain's).
  ComputeTimes forward_parts, backward_parts;
};

// `chain` (its sublayers in order) run on `x` as a stage worker runs it:
// the forward with autograd, the backward from its output (autograd only
// on the clock: the forward before it is not), the frozen forward without
// autograd; with `again` (bf16 autocast), the forward once more with the
// weights' bf16 copies kept, as a later micro-batch of an iteration runs.
// The chain's input takes a gradient when `input_grad` (the executor never
// differentiates the stem's input: images or token ids); with `input_only`
// as well, the backward once more with the weights frozen, as a layer
// frozen inside runs it (decision 0037): the input's gradient alone.
ChainTimes time_chain(const std::vector<Sublayer*>& chain, const at::Tensor& x, bool input_grad, bool again,
                      bool input_only, const ProfileOptions& o, const at::Device& dev) {
  const auto forward = [&](at::Tensor t) {
    for (Sublayer* sub : chain) t = sub->forward(t);
    return t;
  };
  const auto trainable = [&](bool on) {
    for (Sublayer* sub : chain) sub->set_requires_grad(on);
  };
  const auto leaf = [&] { return input_grad ? x.detach().requires_grad_(true) : x; };
  // Each timed forward casts its weights to bf16 afresh, as the first
  // forward after an optimizer step does (the pipeline clears autocast's
  // copies every iteration).
  const auto fresh_casts = [] { at::autocast::clear_cache(); };
  // A forward's output (and its graph) is dropped before the next, off the
  // clock: the pipeline keeps it for the backward, which frees the graph.
  at::Tensor out;
  const auto drop = [&] { out = at::Tensor(); };
  const auto forward_kept = [&] { out = forward(leaf()); };
  ChainTimes t;
  trainable(true);
  t.forward_parts = median_compute_times(
      dev, o.repeats,
      [&] {
        drop();
        fresh_casts();
      },
      forward_kept);
  t.forward = t.forward_parts.seconds;
  if (again) t.forward_again = median_compute_seconds(dev, o.repeats, drop, forward_kept);  // its warm-up casts
  drop();
  at::Tensor grad;
  const auto reset_grads = [&] {
    for (Sublayer* sub : chain)
      for (auto& prm : sub->params()) prm.tensor.mutable_grad().reset();
  };
  t.backward_parts = median_compute_times(
      dev, o.repeats,
      [&] {
        reset_grads();
        fresh_casts();
        out = forward(leaf());
        grad = at::ones_like(out);
      },
      [&] { torch::autograd::backward({out}, {grad}); });
  t.backward = t.backward_parts.seconds;
  out = grad = at::Tensor();
  reset_grads();
  trainable(false);
  if (input_grad && input_only) {
    t.backward_input = median_compute_seconds(
        dev, o.repeats,
        [&] {
          fresh_casts();
          out = forward(leaf());
          grad = at::ones_like(out);
        },
        [&] { torch::autograd::backward({out}, {grad}); });
    out = grad = at::Tensor();
  }
  t.frozen_forward = median_compute_seconds(dev, o.repeats, drop, [&] {
    c10::NoGradGuard g;
    out = forward(x);
  });
  drop();
  return t;
}

// Per sublayer kind and micro-batch size b = 1, 2, 4, ... up to the batch:
// the kind's chains split the work among the kinds, and the whole model
// run as one chain at b sets its total. A stage runs its sublayers as one
// chain per micro-batch, and what a chain costs beyond its kernels (the
// launches and autograd's start-up, where the device outruns the host)
// differs with the chain's length, so each kind's time at b is scaled by
// the whole chain's time over the sum of its sublayers' (`log`: the
// factors).
void profile_compute(const Config& c, const ProfileOptions& o, const at::Device& dev, Profile& p) {
  Model model(c.model, c.training.seed);
  const int last = model.num_sublayers() - 1;
  at::manual_seed(1);
  const compat::AutocastScope precision(dev.type(), c.training.precision == Precision::BF16);
  for (int i = 0; i < model.num_sublayers(); ++i) model.sublayer(i).to(dev);
  std::vector<Sublayer*> all;
  for (int i = 0; i <= last; ++i) all.push_back(&model.sublayer(i));
  std::map<std::string, int> of_kind;  // how many sublayers the model has of each kind
  for (int i = 0; i <= last; ++i) ++of_kind[to_string(model.spec().sublayers[i].kind)];
  // The ops timed, as the profile names them; forward_again only under bf16
  // (in fp32 there are no weight copies to reuse: forward stands in).
  const bool bf16 = c.training.precision == Precision::BF16;
  std::vector<std::pair<const char*, double ChainTimes::*>> ops{
      {"forward", &ChainTimes::forward}, {"backward", &ChainTimes::backward}, {"frozen_forward", &ChainTimes::frozen_forward}};
  if (bf16) ops.emplace_back("forward_again", &ChainTimes::forward_again);
  std::string factors, parts;
  std::vector<std::string> kinds;  // in the order measured
  std::map<std::string, std::vector<ComputeSample>> rows;
  for (int b = 1; b <= c.training.batch_size; b *= 2) {
    std::vector<std::pair<std::string, ChainTimes>> per_sublayer;  // per kind, in the order measured
    for (const int i : {0, 1, 2, last}) {
      std::vector<Sublayer*> chain{&model.sublayer(i)};
      if (i != 0 && i != last)
        for (int j = i + 2; j < last && static_cast<int>(chain.size()) < kChain; j += 2) chain.push_back(&model.sublayer(j));
      at::Tensor x;
      {
        c10::NoGradGuard g;
        x = model.forward({0, i}, stem_input(c.model, b, dev));  // the chain's real input
      }
      // Attention and MLP: the sublayers of a layer that can freeze inside.
      const bool inside = i != 0 && i != last;
      ChainTimes t = time_chain(chain, x, i != 0 && x.is_floating_point(), bf16, inside, o, dev);
      for (const auto& [name, op] : ops) t.*op /= static_cast<double>(chain.size());
      t.backward_input /= static_cast<double>(chain.size());
      per_sublayer.emplace_back(to_string(model.spec().sublayers[i].kind), t);
    }
    const ChainTimes whole = time_chain(all, stem_input(c.model, b, dev), false, bf16, false, o, dev);
    factors += (factors.empty() ? "" : "; ") + std::to_string(b) + ":";
    if (dev.is_cuda()) {  // which of the two bounds the chain: one action's host work overlaps the next's kernels
      char line[160];
      std::snprintf(line, sizeof line, "%s%d: %.2f / %.2f, %.2f / %.2f", parts.empty() ? "" : "; ", b,
                    whole.forward_parts.host_s * 1e3, whole.forward_parts.device_s * 1e3,
                    whole.backward_parts.host_s * 1e3, whole.backward_parts.device_s * 1e3);
      parts += line;
    }
    for (const auto& [name, op] : ops) {
      p.model_chain.push_back({name, b, whole.*op});
      double sum = 0;
      for (const auto& [kind, t] : per_sublayer) sum += of_kind[kind] * t.*op;
      const double factor = whole.*op / sum;
      for (const auto& [kind, t] : per_sublayer) {
        if (!rows.count(kind)) kinds.push_back(kind);
        rows[kind].push_back({kind, name, b, t.*op * factor});
      }
      // The input's gradient alone has no whole-chain time of its own
      // (the stem's input takes none): it is scaled as the backward is.
      if (op == &ChainTimes::backward)
        for (const auto& [kind, t] : per_sublayer)
          if (t.backward_input > 0) rows[kind].push_back({kind, "backward_input", b, t.backward_input * factor});
      char f[32];
      std::snprintf(f, sizeof f, "%s %.2f", name == ops.front().first ? "" : " /", factor);
      factors += f;
    }
  }
  for (const std::string& kind : kinds) p.compute.insert(p.compute.end(), rows[kind].begin(), rows[kind].end());
  if (o.log) o.log(std::string("  the whole model as one chain over its sublayers' sum, per micro-batch size (forward / "
                               "backward / frozen forward") + (bf16 ? " / forward again" : "") + "): " + factors);
  if (o.log && !parts.empty())
    o.log("  the whole model as one chain, ms queuing on the host / running on the device (forward, backward): " + parts);
}

// The pipeline's hand-over between stage workers: a tensor put into a
// slot by one thread and taken by another (one hop, timed as half a round
// trip), then `.to(device)` of the next stage's device: a no-op between
// CPU workers, a copy between two GPUs (the second GPU when one is visible).
void profile_p2p(const ProfileOptions& o, const at::Device& dev, Profile& p) {
  const at::Device peer_dev =
      dev.is_cuda() && at::getNumGPUs() > 1 ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(1)) : dev;
  for (double bytes = 4096; bytes <= 16.0 * 1024 * 1024; bytes *= 4) {
    const at::Tensor t = at::zeros({static_cast<std::int64_t>(bytes / 4)}, at::TensorOptions().device(dev));
    std::mutex mu;
    std::condition_variable cv;
    at::Tensor slot;
    int turn = 0;  // 1: the peer holds the tensor
    bool stop = false;
    std::thread peer([&] {
      std::unique_lock lock(mu);
      while (true) {
        cv.wait(lock, [&] { return stop || turn == 1; });
        if (stop) return;
        at::Tensor got = std::move(slot).to(peer_dev);
        compat::synchronize(peer_dev);
        slot = got.to(dev);  // back, so each round starts alike
        compat::synchronize(dev);
        turn = 0;
        cv.notify_all();
      }
    });
    const double rt = median_seconds(o.repeats * 4, [&] {
      std::unique_lock lock(mu);
      slot = t;
      turn = 1;
      cv.notify_all();
      cv.wait(lock, [&] { return turn == 0; });
    });
    {
      std::lock_guard lock(mu);
      stop = true;
    }
    cv.notify_all();
    peer.join();
    p.p2p.push_back({bytes, rt / 2});
  }
}

// On CUDA the ranks are GPUs and the all-reduce NCCL's, as the pipeline's
// lanes run it: none is timed with fewer than two GPUs (the cost model's
// analytic all-reduce stands in).
void profile_collectives(const Config& c, const ProfileOptions& o, const at::Device& dev, Profile& p) {
  const bool cuda = dev.is_cuda();
  const int most = cuda ? std::min({4, c.cluster.total_gpus(), static_cast<int>(at::getNumGPUs())})
                        : std::max(2, std::min(4, c.cluster.total_gpus()));
  const std::chrono::milliseconds timeout(static_cast<std::int64_t>(read_exec_config(c).collective_timeout_s * 1000));
  for (int n = 2; n <= most; ++n) {
    std::vector<double> rebuild(n);
    std::vector<std::vector<double>> times(n);
    std::vector<double> sizes;
    for (double bytes = 4096; bytes <= 16.0 * 1024 * 1024; bytes *= 4) sizes.push_back(bytes);
    with_ranks(n, timeout, [&](Dist& d, int r, const std::vector<int>& ranks) {
      const at::Device mine = cuda ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(r)) : dev;
      // Timed as a run's transition meets it: with a group before it to retire.
      (void)d.rebuild_active(0, ranks, 1, {mine});
      rebuild[r] = d.rebuild_active(1, ranks, 1, {mine});
      for (const double bytes : sizes) {
        at::Tensor t = at::ones({static_cast<std::int64_t>(bytes / 4)}, at::TensorOptions().device(mine));
        // The barrier before each timed call starts the ranks together.
        times[r].push_back(median_seconds(o.repeats, [&] {
          d.barrier("profile");
          d.allreduce(0, t, "profile all-reduce")->wait();
          compat::synchronize(mine);
        }));
      }
      // A barrier alone, to subtract.
      times[r].push_back(median_seconds(o.repeats, [&] { d.barrier("profile"); }));
    });
    const double barrier = times[0].back();
    for (std::size_t i = 0; i < sizes.size(); ++i)
      p.allreduce.push_back({sizes[i], n, std::max(1e-7, times[0][i] - barrier)});
    p.transitions.push_back({"group_rebuild", n, 0, *std::max_element(rebuild.begin(), rebuild.end())});
  }
}

// AutoCache's probe set up as a run's first freeze step sets it up (its
// batch copied onto the device, its file in the host tier) and its first
// measurement, less a second measurement at the same depth: the one-off
// work a run pays once (a batch's first pinned buffers, the file's first
// writes, the process's first forward without autograd), which the planner
// charges at the first freeze step. Measured on `pipe`'s stage-0 worker with
// `threads`, as a run measures its probe (Trainer::probe_cache): on a CPU
// the calling thread's own OpenMP team would run it slower.
void profile_probe_setup(const Config& c, Pipeline& pipe, int threads, Model& model,
                         const std::vector<std::int64_t>& shape, const at::Device& dev, Profile& p) {
  const at::Tensor batch = stem_input(c.model, c.training.batch_size, at::kCPU);  // made off the clock
  const std::string dir = read_exec_config(c).cache_memory_dir;
  const std::string path = (std::filesystem::path(dir) /
                            ("elasticpipe-profile-" + std::to_string(getpid()) + "-probe.cache"))
                               .string();
  const auto device_of = [&](int) { return dev; };
  std::filesystem::create_directories(dir);
  const Clock::time_point t0 = Clock::now();
  CacheProbe probe(batch.clone().to(dev), c.training.precision == Precision::BF16, path, shape);
  // And, set up, at half the layers: two depths of whole probes as a run's
  // later ones run, which the simulator scales the probe's terms to.
  const int deeper = std::max(1, c.model.num_hidden_layers / 2);
  Clock::time_point t1, t2, t3;
  pipe.on_worker(threads, [&] {
    (void)probe.measure(model, 1, device_of);
    t1 = Clock::now();
    (void)probe.measure(model, 1, device_of);
    t2 = Clock::now();
    (void)probe.measure(model, deeper, device_of);
    t3 = Clock::now();
  });
  const double first = seconds(t0, t1), again = seconds(t1, t2);
  double row_bytes = 4;
  for (const std::int64_t d : shape) row_bytes *= static_cast<double>(d);
  p.transitions.push_back({kCacheProbeSetupWhat, 1, row_bytes * c.training.batch_size, std::max(0.0, first - again)});
  p.cache_probes.push_back({1, c.training.batch_size, again});
  p.cache_probes.push_back({deeper, c.training.batch_size, seconds(t2, t3)});
}

// A freeze step's warm-up as a run meets its first (after the start and
// AutoCache's probe), as Trainer's warm-up meter measures it: one layer
// frozen, the first iteration over the median of the next, to the device's finish.
void profile_freeze_warmup(const PlanContext& ctx, IterationSetup s, const ProfileOptions& o, ReplicaRun& r,
                           Profile& p) {
  if (ctx.config.model.num_hidden_layers < 2) return;  // nothing can freeze
  s.partition = plan_partition(ctx, 1, 1, false);
  const IterationProgram step = lower_iteration(ctx, s);
  r.pipe.configure(s.partition, s.K, s.v);
  const auto run = [&] { (void)r.run(step); };
  const double first = seconds_of(r.devices.front(), run);
  const double later = median_device_seconds(r.devices.front(), std::max(o.repeats, 5), run);
  p.transitions.push_back({kFreezeWarmupWhat, 1, 0.0, std::max(0.0, first - later)});
}

// What a run pays once, measured first, in the order and the process state
// in which a run meets it: the run's start (run_start_iterations, the
// procedure a run's start runs; K = 1, one micro-batch, nothing frozen),
// its first batch assembled by the batch loader as a run's is (none is
// ahead of it: in pinned memory on a GPU, its first blocks made) and the
// next ones assembled during it, over the median of the same iterations
// later, whose batches are on the device already: the work a run does once,
// in its start (the first batches, kernels loaded, library handles made,
// allocators grown); then, with only training iterations run so far, as at a run's
// first freeze step, AutoCache's probe set-up (profile_probe_setup).
// Nothing measured before them has warmed what they measure. Returns a
// cache row's shape.
std::vector<std::int64_t> profile_run_start(const Config& c, const ProfileOptions& o, const at::Device& dev,
                                            Profile& p) {
  const AnalyticCostModel analytic(c.cluster, c.training);
  const PlanContext ctx(c, analytic, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  IterationSetup s;
  s.partition = plan_partition(ctx, 0, 1, false);
  s.K = 1;
  s.M = 1;
  s.batch = c.training.batch_size;
  s.grad_norms = reads_grad_norms(c);  // the step as the run takes it
  const IterationProgram start = timing_program(ctx, lower_iteration(ctx, s));  // a start_program's kind
  ReplicaRun r(c, s, start.micro_batches, nullptr, 0);
  const Dataset data = input_shaped(c, s.batch);
  BatchLoader loader(data);
  const std::optional<PinnedAllocs> pinned_before = dev.is_cuda() ? pinned_allocs_now() : std::nullopt;
  const BatchLoader::Request request = batch_request(r.pipe, first_samples(data, s.batch), start);
  const auto t0 = std::chrono::steady_clock::now();
  run_start_iterations(r.pipe, loader, start, request, request, s.batch);
  const double whole = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  loader.settle();
  const std::optional<PinnedAllocs> pinned = pinned_allocs_since(pinned_before);
  const double later = median_seconds(o.repeats, [&] { (void)r.run(start); });
  p.transitions.push_back({kFirstIterationWhat, 1, 0.0, std::max(0.0, whole - kStartIterations * later)});
  // Beside a run's start line (its iterations, its blocks made).
  if (o.log) {
    char line[192];
    std::snprintf(line, sizeof line, "  the run's start: %d iterations in %.2f ms, later ones %.2f ms each (median)%s%s",
                  kStartIterations, whole * 1e3, later * 1e3, pinned ? "; " : "",
                  pinned ? format_pinned(*pinned).c_str() : "");
    o.log(line);
  }
  at::Tensor row;
  {
    c10::NoGradGuard g;  // as the trainer finds a cache row's shape
    row = r.model.forward({0, 1}, stem_input(c.model, 1, dev));
  }
  const std::vector<std::int64_t> shape = row.sizes().slice(1).vec();
  profile_probe_setup(c, r.pipe, start.threads.worker, r.model, shape, dev, p);
  profile_freeze_warmup(ctx, s, o, r, p);
  return shape;
}

// This process's first touch of the device, to the device's finish: on a
// GPU its context created, which a run's start and a woken process pay
// (profile_run_start times the first iteration with it made).
void profile_device_context(const at::Device& dev, Profile& p) {
  const Clock::time_point t0 = Clock::now();  // seconds_of would touch the device first
  compat::use_device(dev);
  (void)at::zeros({1}, at::TensorOptions().device(dev));
  compat::synchronize(dev);
  p.transitions.push_back({kDeviceContextWhat, 1, 0.0, seconds(t0, Clock::now())});
}

// Reads go to the training device and writes come from it, as the
// pipeline's CacheRead and CacheWrite move them; rows of `shape`.
void profile_cache(const Config& c, const ProfileOptions& o, const at::Device& dev,
                   const std::vector<std::int64_t>& shape, Profile& p) {
  const int n = std::max(64, c.training.batch_size);
  const ExecConfig x = read_exec_config(c);
  std::vector<std::pair<std::string, std::string>> tiers{{"host", x.cache_memory_dir}};
  tiers.push_back({"disk", x.cache_disk_dir.empty() ? std::filesystem::temp_directory_path().string()
                                                    : x.cache_disk_dir});
  for (const auto& [tier, dir] : tiers) {
    std::filesystem::create_directories(dir);
    const std::string path = (std::filesystem::path(dir) / ("elasticpipe-profile-" + std::to_string(getpid()) +
                                                            "-" + tier + ".cache"))
                                 .string();
    // Created as the trainer creates the node's file (which holds the
    // whole dataset's rows: the planner scales this by bytes).
    const auto t0 = std::chrono::steady_clock::now();
    ActivationCache cache(path, n, shape, true);
    p.transitions.push_back({cache_create_what(tier), 1, static_cast<double>(n) * static_cast<double>(cache.entry_bytes()),
                             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()});
    for (int b = 1; b <= n; b *= 4) {
      std::vector<std::int64_t> idx(b);
      for (int i = 0; i < b; ++i) idx[i] = i;
      const at::Tensor values = at::randn([&] {
        std::vector<std::int64_t> s{b};
        s.insert(s.end(), shape.begin(), shape.end());
        return s;
      }()).to(dev);
      const double bytes = static_cast<double>(b) * static_cast<double>(cache.entry_bytes());
      // A write until it is stored, as training writes it (behind the
      // worker, from a GPU: the copy to the host and the writer's store;
      // the planner charges that to the writer, not to the device).
      p.cache.push_back({tier, "write", bytes, median_seconds(o.repeats, [&] {
                           cache.write(idx, values, 1, cache_writes_behind(c));
                           cache.flush();
                         })});
      // As AutoCache's probe times it (CacheProbe::measure).
      p.cache.push_back({tier, "read", bytes, median_compute_seconds(dev, o.repeats, [&] { (void)cache.read(idx, 1, dev); })});
    }
    cache.remove();
  }
}

void profile_optimizer(const Config& c, const ProfileOptions& o, const at::Device& dev, Profile& p) {
  Model model(c.model, c.training.seed);
  for (int i = 0; i < model.num_sublayers(); ++i) model.sublayer(i).to(dev);
  // Growing prefixes of the parameter list: one sublayer, a layer, half, all.
  const auto all = model.named_params();
  for (const double share : {0.1, 0.25, 0.5, 1.0}) {
    const auto n = std::max<std::size_t>(1, static_cast<std::size_t>(share * static_cast<double>(all.size())));
    std::vector<NamedTensor> ps(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n));
    exec::Optimizer opt(c.training);
    double params = 0;
    for (auto& q : ps) {
      opt.add(q.name);
      q.tensor.mutable_grad() = at::randn_like(q.tensor) * 1e-3;
      params += static_cast<double>(q.tensor.numel());
    }
    // The update and the gradients' norms apart: a step computes the norms
    // only where the freeze policy reads them (IterationSetup::grad_norms).
    std::vector<at::Tensor> grads;
    for (const auto& q : ps) grads.push_back(q.tensor.grad());
    p.optimizer.push_back({params, median_compute_seconds(dev, o.repeats, [&] { opt.step(ps, 1e-6); })});
    p.grad_norms.push_back(
        {params, median_compute_seconds(dev, o.repeats, [&] { (void)grad_sq_norms(grads, dev); })});
    if (share == 1.0 && o.log) {
      char line[200];
      std::snprintf(line, sizeof line,
                    "  the optimizer step of all %.4g parameters: %.3f ms, and %.3f ms more for the gradients' norms "
                    "where the freeze policy reads them (%s)",
                    params, 1e3 * p.optimizer.back().seconds, 1e3 * p.grad_norms.back().seconds,
                    reads_grad_norms(c) ? "this config's does" : "this config's does not");
      o.log(line);
    }
    for (auto& q : ps) q.tensor.mutable_grad().reset();
  }
}

void profile_state_transfer(const Config& c, const ProfileOptions& o, Profile& p) {
  Model model(c.model, c.training.seed), other(c.model, c.training.seed + 1);
  exec::Optimizer opt(c.training), opt2(c.training);
  double bytes = 0;
  const double s = median_seconds(o.repeats, [&] {
    const auto packed = pack_state(model, opt, nlohmann::json::object());
    bytes = static_cast<double>(packed.size());
    (void)unpack_state(packed, other, opt2, "profile");
  });
  p.transitions.push_back({"state_pack_unpack", 1, bytes, s});
}

}  // namespace

Profile profile_executor(const Config& c, const ProfileOptions& o) {
  const at::Device dev = profiled_device(c);
  const auto log = [&](const std::string& s) {
    if (o.log) o.log(s);
  };
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = o.threads > 0 ? o.threads : std::max(1, cores / std::max(1, c.planner.K));
  Profile p;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  p.environment = std::string(host) + ", " + std::to_string(cores) + " cores, " + dev.str() +
                  (dev.is_cuda() ? " (" + std::to_string(at::getNumGPUs()) + " GPU(s) visible)" : std::string()) +
                  ", " + to_string(c.training.precision) + ", libtorch " + TORCH_VERSION + ", " +
                  std::to_string(threads) + " intra-op threads, BLAS " + blas_library().name;
  p.model = profile_model(c);
  log("a run's start and AutoCache's probe set-up on " + dev.str() + "...");
  // As a run meets them: model work on a stage worker, this thread on one
  // intra-op thread (as Trainer's), so that no second OpenMP team beside
  // the worker's stops libgomp spinning (the probe ran 24-32% slower here
  // than in a run on a 2-core CPU).
  compat::set_thread_count(1);
  const SettledTimings settled;  // this thread's medians repeat until they settle
  profile_device_context(dev, p);
  const std::vector<std::int64_t> row_shape = profile_run_start(c, o, dev, p);
  compat::set_thread_count(threads);  // the rest runs on this thread
  log("compute on " + dev.str() + " (forward, backward, frozen forward per sublayer kind)...");
  profile_compute(c, o, dev, p);
  log("point-to-point hand-over...");
  profile_p2p(o, dev, p);
  log(dev.is_cuda() ? "all-reduce and group rebuild (NCCL, one rank per visible GPU)..."
                    : "all-reduce and group rebuild (Gloo, ranks as threads)...");
  profile_collectives(c, o, dev, p);
  log("activation cache (host and disk)...");
  profile_cache(c, o, dev, row_shape, p);
  log("optimizer steps...");
  profile_optimizer(c, o, dev, p);
  log("state pack and unpack...");
  profile_state_transfer(c, o, p);
  const TimingSpread& spread = settled.spread();
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "timings: %d medians, %d of them spread more than %.0f%% (interquartile range over the median) "
                "after up to %dx the repeats; the largest spread %.0f%%%s",
                spread.medians, spread.unsettled, 100 * kSettledSpread, kMaxRunsFactor, 100 * spread.worst,
                spread.unsettled ? ": this machine is noisy, the fits below say how much it shows" : "");
  log(buf);
  return p;
}

}  // namespace ep::exec
