// Lowering: an iteration setup becomes the program a back end carries out
// (iteration.hpp), with every rule a back end used to apply itself.
#include <algorithm>

#include "planner/iteration.hpp"
#include "planner/run_plan.hpp"

namespace ep {

WorkerThreads worker_threads(const Config& c, int K, int pipelines_per_node, int host_cores) {
  if (host_cores <= 0) return {};
  const int process = std::max(1, host_cores / std::max(1, pipelines_per_node));
  const int worker = c.exec.threads_per_worker > 0 ? c.exec.threads_per_worker : std::max(1, process / std::max(1, K));
  return {worker};
}

IterationProgram lower_iteration(const PlanContext& ctx, const IterationSetup& s) {
  IterationProgram p;
  p.setup = s;
  p.schedule = build_schedule(schedule_options(ctx, s));
  p.micro_batches = micro_batch_sizes(s.batch, s.M);
  p.recomputed_microbatches = recomputed_microbatches(ctx.config.training.checkpointing, s.M);
  p.layout = replica_layout(ctx.config, s.K, s.replicas);
  p.threads = worker_threads(ctx.config, s.K, p.layout.pipelines_per_node, ctx.host_cores);
  return p;
}

IterationProgram timing_program(const PlanContext& ctx, const IterationProgram& candidate) {
  IterationProgram t = candidate;
  t.setup.replicas = 1;
  t.setup.cache_on = false;
  t.setup.cache_valid_layers = -1;
  ScheduleOptions o = schedule_options(ctx, t.setup);
  o.optimizer_step = false;
  t.schedule = build_schedule(o);
  t.layout = {};  // one replica, timed alone
  return t;
}

}  // namespace ep
