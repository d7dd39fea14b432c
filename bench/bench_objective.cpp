// The plans the two objectives choose, run for real: for every freeze step
// of the config's run, the plan of planner.objective = "time" and the plan
// of "paper" (same frozen counts), each measured as the executor runs it
// (replicas as threads with their own Gloo ranks on loopback, the same
// all-reduce and core sharing as one process per replica; steady state,
// the cache read when the plan caches). Interleaved repeats, medians.
//   ./build/bench_objective [config] [iterations] [repeats] [--set k=v ...]
// Plans are made with the config's cost model (analytic; the executor's
// own chunk timing is not used, as with exec.chunk_search_iterations = 0).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "exec/profiler.hpp"
#include "planner/run_plan.hpp"
#include "planner/stats.hpp"

namespace {

using ep::median;

std::string describe(const ep::Plan& p) {
  std::string stages;
  for (int s = 0; s < p.partition.K(); ++s)
    stages += (s ? "," : "") + std::to_string(p.partition.bounds[s + 1] - p.partition.bounds[s]);
  return "K=" + std::to_string(p.K) + " M=" + std::to_string(p.M) + " x" + std::to_string(p.layout.replicas) +
         (p.cache.on ? " cache" : "") + " [" + stages + "]";
}

}  // namespace

int main(int argc, char** argv) {
  std::string path = EP_SOURCE_DIR "/configs/fashion_mnist_vit_tiny.toml";
  int iterations = 20, repeats = 5, positional = 0;
  ep::Overrides overrides;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--set" && i + 1 < argc) {
      overrides.push_back(argv[++i]);
    } else if (positional == 0) {
      path = a, ++positional;
    } else if (positional == 1) {
      iterations = std::atoi(a.c_str()), ++positional;
    } else {
      repeats = std::atoi(a.c_str()), ++positional;
    }
  }
  try {
    ep::Overrides time_o = overrides, paper_o = overrides;
    time_o.push_back("planner.objective=time");
    paper_o.push_back("planner.objective=paper");
    const ep::Config ct = ep::load_config(path, time_o), cp = ep::load_config(path, paper_o);
    const ep::AnalyticCostModel cost_t(ct.cluster, ct.training), cost_p(cp.cluster, cp.training);
    const ep::RunPlan rt = ep::plan_run(ct, cost_t), rp = ep::plan_run(cp, cost_p);
    std::vector<std::vector<double>> t_time(rt.plans.size()), t_paper(rp.plans.size());
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const ep::PlanContext ctx_t(ct, cost_t, cores), ctx_p(cp, cost_p, cores);
    // A plan's steady state (after one fill with the cache on), lowered for this machine's cores.
    const auto measured = [&](const ep::PlanContext& ctx, const ep::Plan& plan) {
      ep::ValidationPlan v;
      v.setup = ep::iteration_setup(ctx.config, plan, false);
      v.program = ep::lower_iteration(ctx, v.setup);
      ep::IterationSetup fill = v.setup;
      fill.cache_valid_layers = 0;
      if (v.setup.cache_on) v.fill = ep::lower_iteration(ctx, fill);
      return ep::exec::measure_iterations(ctx.config, {v}, iterations)[0].seconds;
    };
    for (int r = 0; r < repeats; ++r)
      for (std::size_t i = 0; i < rt.plans.size(); ++i) {
        t_time[i].push_back(measured(ctx_t, rt.plans[i]));
        t_paper[i].push_back(measured(ctx_p, rp.plans[i]));
      }
    std::printf("%s: %d iterations x %d repeats per plan, interleaved (medians)\n", path.c_str(), iterations, repeats);
    std::printf("%3s %7s  %-32s %10s  %-32s %10s  %7s\n", "T", "frozen", "objective time", "samples/s", "objective paper",
                "samples/s", "ratio");
    for (std::size_t i = 0; i < rt.plans.size(); ++i) {
      const ep::Plan &a = rt.plans[i], &b = rp.plans[i];
      const double sa = a.layout.replicas * static_cast<double>(ct.training.batch_size) / median(t_time[i]);
      const double sb = b.layout.replicas * static_cast<double>(cp.training.batch_size) / median(t_paper[i]);
      std::printf("%3d %7d  %-32s %10.1f  %-32s %10.1f  %6.3fx\n", a.freeze_step, a.frozen_layers, describe(a).c_str(),
                  sa, describe(b).c_str(), sb, sa / sb);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ERROR: %s\n", e.what());
    return 2;
  }
  return 0;
}
