#include "exec/replica_run.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <unistd.h>

#include <algorithm>
#include <exception>
#include <filesystem>
#include <memory>
#include <numeric>
#include <thread>

#include "exec/cache.hpp"
#include "exec/exec_config.hpp"
#include "exec/hf_weights.hpp"
#include "exec/job.hpp"
#include "exec/launch.hpp"
#include "exec/profiler.hpp"
#include "exec/timing.hpp"
#include "exec/torch_compat.hpp"
#include "planner/error.hpp"

namespace ep::exec {

at::Tensor stem_input(const ModelConfig& m, int b, const at::Device& dev) {
  if (m.family == ModelFamily::ViT) return at::randn({b, m.num_channels, m.image_size, m.image_size}).to(dev);
  return at::randint(1, m.vocab_size, {b, m.seq_length}, at::kLong).to(dev);
}

std::vector<at::Device> replica_devices(const Config& c, int K, int rank) {
  std::vector<at::Device> devices;
  for (int k = 0; k < K; ++k)
    devices.push_back(c.device == DeviceKind::CUDA ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(rank * K + k))
                                                        : at::Device(at::kCPU));
  return devices;
}

Dataset input_shaped(const Config& c, int n) {
  const ModelConfig& m = c.model;
  return m.family == ModelFamily::ViT ? synthetic_images(n, m.num_channels, m.image_size, m.num_labels, 1, true)
                                      : synthetic_tokens(n, m.seq_length, m.vocab_size, m.num_labels, 1, true);
}

void with_ranks(int n, std::chrono::milliseconds timeout,
                const std::function<void(Dist&, int, const std::vector<int>&)>& body) {
  const int port = free_port();
  std::vector<int> all(n);
  std::iota(all.begin(), all.end(), 0);
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(n);
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        Dist d(local_env(r, n, port, "profile"), timeout);
        body(d, r, all);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

ReplicaRun::ReplicaRun(const Config& c, const IterationSetup& s, const std::vector<int>& micro_batches, Dist* dist,
                       int rank)
    : model(c.model, c.training.seed, checkpoint_dropout(c.model.checkpoint)),  // timed as training runs it
      opt(c.training),
      devices(replica_devices(c, s.K, rank)),
      pipe(model, opt, {devices, c.training.precision == Precision::BF16}),
      batch(s.batch) {
  pipe.configure(s.partition, s.K, s.v);
  pipe.set_reducer(dist);
  at::manual_seed(2 + rank);
  const at::Tensor x = stem_input(c.model, batch, devices.front());
  const at::Tensor y = at::randint(0, c.model.num_labels, {batch}, at::kLong).to(devices.back());
  std::int64_t at = 0;
  for (const int n : micro_batches) {
    MicroBatch mb(x.narrow(0, at, n), y.narrow(0, at, n), at::ones({n}, at::TensorOptions().device(devices.back())));
    for (int i = 0; i < n; ++i) mb.indices.push_back(at + i);
    mbs.push_back(mb);
    at += n;
  }
}

namespace {

// One replica's median iteration of the plan's program and its median
// queuing; with `dist`, its gradients are all-reduced with the other
// replicas (rank `rank`).
MeasuredIterations measure_replica(const Config& c, const ValidationPlan& plan, int iterations, Dist* dist, int rank) {
  const IterationSetup& s = plan.program.setup;
  compat::use_device(replica_devices(c, s.K, rank).front());  // a replica's thread: its own GPU (see use_device)
  ReplicaRun r(c, s, plan.program.micro_batches, dist, rank);
  std::unique_ptr<ActivationCache> cache;
  if (s.cache_on) {
    at::Tensor row;
    r.pipe.on_worker(plan.program.threads.worker, [&] {  // not here: see Pipeline::on_worker
      c10::NoGradGuard g;
      row = r.model.forward({0, 1}, r.mbs.front().input.narrow(0, 0, 1));
    });
    const std::string dir = s.cache_tier == CacheTier::HostMemory ? read_exec_config(c).cache_memory_dir
                                                                  : std::filesystem::temp_directory_path().string();
    cache = std::make_unique<ActivationCache>(
        (std::filesystem::path(dir) /
         ("elasticpipe-validate-" + std::to_string(getpid()) + "-" + std::to_string(rank) + ".cache"))
            .string(),
        s.batch, row.sizes().slice(1).vec(), true);
    r.pipe.set_cache(cache.get());
    (void)r.run(plan.fill);
  }
  // Batches as training's loader gives them: the next iteration's
  // assembled (and, where the plan reads the cache ahead, its rows read
  // onto the device) while this one runs; a wait for them is on the clock.
  const Dataset data = input_shaped(c, s.batch);
  BatchLoader loader(data);
  const BatchLoader::Request next = batch_request(r.pipe, first_samples(data, s.batch), plan.program);
  loader.request(next);
  std::vector<double> queued;  // per run, warm-up included
  const double t = median_of_runs(iterations, [] {}, [&] {
    const Clock::time_point t0 = Clock::now();
    const std::vector<MicroBatch> batches = loader.take(next);
    loader.request(next);
    IterationFuture f = r.pipe.launch(plan.program, batches, s.batch, 1e-6);
    queued.push_back(seconds(t0, Clock::now()));
    (void)f.get();
    return seconds(t0, Clock::now());
  });
  loader.settle();  // its read done before the cache goes
  if (cache) cache->remove();
  return {t, median_after_warmup(std::move(queued))};
}

// Every plan's stages and replicas on GPUs of their own (or the CPU).
void check_measurable(const Config& c, const std::vector<ValidationPlan>& plans) {
  const int visible = check_device(c);
  for (const ValidationPlan& plan : plans) {
    const int need = plan.program.setup.K * plan.program.setup.replicas;
    if (visible > 0 && need > visible)
      throw Error(c.source + ": plan '" + plan.name + "' runs " + std::to_string(plan.program.setup.replicas) +
                  " replica(s) of K = " + std::to_string(plan.program.setup.K) + " stages on " + std::to_string(need) +
                  " GPUs; this process sees " + std::to_string(visible) +
                  ": validate where they are visible, or set cluster.gpus_per_node to " + std::to_string(visible));
  }
}

}  // namespace

std::vector<MeasuredIterations> measure_iterations(const Config& c, const std::vector<ValidationPlan>& plans,
                                                   int iterations) {
  check_measurable(c, plans);
  const std::chrono::milliseconds timeout(static_cast<std::int64_t>(read_exec_config(c).collective_timeout_s * 1000));
  std::vector<MeasuredIterations> out;
  for (const ValidationPlan& plan : plans) {
    const int replicas = plan.program.setup.replicas;
    if (replicas == 1) {
      out.push_back(measure_replica(c, plan, iterations, nullptr, 0));
      continue;
    }
    // Replicas as threads of this process, each with its own Gloo ranks on
    // loopback: the same code paths and core sharing as processes.
    std::vector<MeasuredIterations> t(replicas);
    with_ranks(replicas, timeout, [&](Dist& d, int r, const std::vector<int>& ranks) {
      d.rebuild_active(0, ranks, plan.program.setup.K, replica_devices(c, plan.program.setup.K, r));
      t[r] = measure_replica(c, plan, iterations, &d, r);
    });
    out.push_back(*std::max_element(t.begin(), t.end(),
                                    [](const auto& a, const auto& b) { return a.seconds < b.seconds; }));
  }
  return out;
}

}  // namespace ep::exec
