// Executor throughput on this machine, medians of interleaved repeats:
// 1. against a plain single-process LibTorch loop on the same model, batch
//    and optimizer (torch::optim::AdamW), both with the machine's cores as
//    intra-op threads and both with one;
// 2. for each plan of the config's own run (its freeze steps, steady state:
//    cache read when the plan caches), relative to the first plan: what
//    freezing and repartitioning buy per iteration, free of the drift that
//    separates two whole training runs on a shared machine.
//   ./build/bench_exec [config] [iterations] [repeats]
#include <unistd.h>
#include <filesystem>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "exec/blas.hpp"
#include "exec/cache.hpp"
#include "exec/model.hpp"
#include "exec/optimizer.hpp"
#include "exec/pipeline.hpp"
#include "exec/torch_compat.hpp"
#include "planner/run_plan.hpp"
#include "planner/stats.hpp"

namespace {

using ep::median;

using Clock = std::chrono::steady_clock;

std::vector<ep::exec::MicroBatch> batches(const ep::ModelConfig& m, int batch, int M) {
  at::manual_seed(0);
  const at::Tensor x = at::randn({batch, m.num_channels, m.image_size, m.image_size});
  const at::Tensor y = at::randint(0, m.num_labels, {batch}, at::kLong);
  std::vector<ep::exec::MicroBatch> out;
  std::int64_t at = 0;
  for (const int n : ep::micro_batch_sizes(batch, M)) {
    std::vector<std::int64_t> idx(n);
    for (int i = 0; i < n; ++i) idx[i] = at + i;  // cache keys
    out.push_back({x.narrow(0, at, n), y.narrow(0, at, n), at::ones({n}), idx});
    at += n;
  }
  return out;
}

// Samples/s of the executor running `plan`'s steady-state schedule (after
// filling the cache once, when the plan caches) with K workers.
double executor(const ep::Config& c, const ep::PlanContext& ctx, const ep::Plan& plan, int iterations,
                int threads) {
  ep::exec::Model model(c.model, 1);
  ep::exec::Optimizer opt(c.training);
  ep::exec::Pipeline pipe(model, opt, {std::vector<at::Device>(plan.K, at::Device(at::kCPU)), false});
  pipe.configure(plan.partition, plan.K, plan.v);
  const auto mbs = batches(c.model, c.training.batch_size, plan.M);
  ep::IterationProgram steady = plan.program;
  // The benchmark's setting; 0: the planner's rule for one pipeline on this machine.
  steady.threads = threads > 0 ? ep::WorkerThreads{threads}
                               : ep::worker_threads(c, plan.K, 1, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  at::Tensor probe;  // one sample's stem output: the cache entry's shape
  pipe.on_worker(steady.threads.worker, [&] {  // as the trainer does (Pipeline::on_worker)
    c10::NoGradGuard no_grad;
    probe = model.forward({0, 1}, mbs[0].input.narrow(0, 0, 1));
  });
  ep::exec::ActivationCache cache((std::filesystem::temp_directory_path() /
                                   ("elasticpipe-bench-" + std::to_string(getpid()) + ".cache")).string(),
                                  c.training.batch_size, probe.sizes().slice(1).vec(), true);
  pipe.set_cache(&cache);
  if (plan.cache.on) {
    ep::IterationSetup fill = steady.setup;
    fill.cache_valid_layers = 0;
    ep::IterationProgram p = ep::lower_iteration(ctx, fill);
    p.threads = steady.threads;
    (void)pipe.run(p, mbs, c.training.batch_size, 1e-4);
  }
  for (int i = 0; i < 3; ++i) (void)pipe.run(steady, mbs, c.training.batch_size, 1e-4);
  const auto t0 = Clock::now();
  for (int i = 0; i < iterations; ++i) (void)pipe.run(steady, mbs, c.training.batch_size, 1e-4);
  const double rate = iterations * c.training.batch_size / std::chrono::duration<double>(Clock::now() - t0).count();
  cache.remove();
  return rate;
}

// One run of the plain loop, on the calling thread.
double plain_loop_here(const ep::Config& c, int iterations, int threads) {
  ep::exec::compat::set_thread_count(threads);
  ep::exec::Model model(c.model, 1);
  std::vector<at::Tensor> params;
  for (auto& p : model.named_params()) params.push_back(p.tensor.requires_grad_(true));
  torch::optim::AdamW opt(params, torch::optim::AdamWOptions(1e-4).weight_decay(c.training.weight_decay));
  const auto mb = batches(c.model, c.training.batch_size, 1).front();
  const ep::SublayerRange all{0, model.num_sublayers()};
  const auto step = [&] {
    opt.zero_grad();
    const at::Tensor loss = at::cross_entropy_loss(model.forward(all, mb.input), mb.labels);
    torch::autograd::backward({loss});
    opt.step();
  };
  for (int i = 0; i < 3; ++i) step();
  const auto t0 = Clock::now();
  for (int i = 0; i < iterations; ++i) step();
  return iterations * c.training.batch_size / std::chrono::duration<double>(Clock::now() - t0).count();
}

// The loop a LibTorch user writes: forward, loss, backward, step, with
// `threads` intra-op threads, on a thread of its own: its OpenMP team ends
// with it. Left on the main thread, the team would stay beside the
// executor's workers run next and throttle them (docs/RESULTS.md, "one
// OpenMP team").
double plain_loop(const ep::Config& c, int iterations, int threads) {
  double rate = 0;
  std::thread([&] { rate = plain_loop_here(c, iterations, threads); }).join();
  return rate;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : EP_SOURCE_DIR "/configs/fashion_mnist_vit_tiny.toml";
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 30;
  const int repeats = argc > 3 ? std::atoi(argv[3]) : 5;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  ep::exec::compat::set_thread_count(cores);
  const ep::Config c = ep::load_config(path);
  const ep::AnalyticCostModel cost(c.cluster, c.training);
  const ep::PlanContext ctx(c, cost);
  const ep::RunPlan run = ep::plan_run(c, cost);
  const ep::Config single_cfg =
      ep::load_config(path, {"planner.K=1", "cluster.gpus_per_node=1", "planner.chunk_search=false", "planner.M=1"});
  const ep::PlanContext single_ctx(single_cfg, cost);
  const ep::Plan single = ep::plan_run(single_cfg, cost).plans.front();

  // Distinct plans of the run (a plan equal to the previous one in frozen
  // layers, K, M and cache is the same iteration).
  std::vector<const ep::Plan*> plans;
  for (const ep::Plan& p : run.plans)
    if (plans.empty() || p.frozen_layers != plans.back()->frozen_layers || p.K != plans.back()->K ||
        p.M != plans.back()->M || p.cache.on != plans.back()->cache.on)
      plans.push_back(&p);
  // Also both at one intra-op thread: on a small model a second thread can
  // cost more than it gives, and K = 1 workers take cores / K by default.
  std::vector<double> plain, exec1, plain_t1, exec1_t1;
  std::vector<std::vector<double>> per_plan(plans.size());
  for (int r = 0; r < repeats; ++r) {
    plain.push_back(plain_loop(c, iterations, cores));
    exec1.push_back(executor(single_cfg, single_ctx, single, iterations, 0));
    plain_t1.push_back(plain_loop(c, iterations, 1));
    exec1_t1.push_back(executor(single_cfg, single_ctx, single, iterations, 1));
    for (std::size_t i = 0; i < plans.size(); ++i) per_plan[i].push_back(executor(c, ctx, *plans[i], iterations, 0));
  }
  std::printf("%s: model %s L=%d H=%d, batch %d, %d cores, %d iterations x %d repeats, interleaved (medians)\n",
              path.c_str(), ep::to_string(c.model.family).c_str(), c.model.num_hidden_layers, c.model.hidden_size,
              c.training.batch_size, cores, iterations, repeats);
  std::printf("BLAS: %s\n", ep::exec::blas_library().name.c_str());
  std::printf("plain LibTorch loop, %d intra-op threads     %8.1f samples/s\n", cores, median(plain));
  std::printf("executor K=1 M=1, %d intra-op threads        %8.1f samples/s  %.3fx plain\n", cores, median(exec1),
              median(exec1) / median(plain));
  std::printf("plain LibTorch loop, 1 intra-op thread      %8.1f samples/s  %.3fx plain\n", median(plain_t1),
              median(plain_t1) / median(plain));
  std::printf("executor K=1 M=1, 1 intra-op thread         %8.1f samples/s  %.3fx plain\n", median(exec1_t1),
              median(exec1_t1) / median(plain));
  for (std::size_t i = 0; i < plans.size(); ++i) {
    const ep::Plan& p = *plans[i];
    std::printf("executor plan T=%d frozen %d K=%d M=%d %-9s %8.1f samples/s  %.3fx plain  %.3fx plan 0\n",
                p.freeze_step, p.frozen_layers, p.K, p.M, p.cache.on ? "cache" : "no cache", median(per_plan[i]),
                median(per_plan[i]) / median(plain), median(per_plan[i]) / median(per_plan[0]));
  }
  return 0;
}
