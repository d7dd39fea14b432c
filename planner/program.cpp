// Lowering: an iteration setup becomes the program a back end carries out
// (iteration.hpp), with every rule a back end used to apply itself.
#include <algorithm>
#include <sstream>

#include "planner/cache_policy.hpp"
#include "planner/iteration.hpp"
#include "planner/program_text.hpp"
#include "planner/run_plan.hpp"

namespace ep {

WorkerThreads worker_threads(const Config& c, int K, int pipelines_per_node, int host_cores) {
  if (host_cores <= 0) return {};
  const int process = std::max(1, host_cores / std::max(1, pipelines_per_node));
  const int worker = c.threads_per_worker > 0 ? c.threads_per_worker : std::max(1, process / std::max(1, K));
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

namespace {

template <class T>
std::string joined(const std::vector<T>& v) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + std::to_string(v[i]);
  return out;
}

}  // namespace

// Every field is written: a field added to these types changes their size
// and stops the build here until it is written too.
static_assert(sizeof(IterationProgram) == 248 && sizeof(IterationSetup) == 96 && sizeof(Partition) == 56 &&
                  sizeof(Schedule) == 40 && sizeof(ReplicaLayout) == 72 && sizeof(ReplicaLayout::Replica) == 40 &&
                  sizeof(WorkerThreads) == 4,
              "program_text writes every field: write the new one too, then update these sizes");

std::string program_text(const IterationProgram& p) {
  const IterationSetup& s = p.setup;
  std::ostringstream os;
  os << "setup K=" << s.K << " v=" << s.v << " M=" << s.M << " replicas=" << s.replicas
     << " span_nodes=" << s.replicas_span_nodes << " cache=" << s.cache_on << " tier=" << to_string(s.cache_tier)
     << " valid_layers=" << s.cache_valid_layers << " batch=" << s.batch << " writes_behind=" << s.cache_writes_behind
     << " reads_ahead=" << s.cache_reads_ahead << " grad_norms=" << s.grad_norms << "\n";
  os << "partition frozen_layers=" << s.partition.frozen_layers << " frozen_end=" << s.partition.frozen_end
     << " bounds=" << joined(s.partition.bounds);
  // Only where there are any: a prefix program's text (and digest) is as before.
  if (!s.partition.frozen_inside.empty()) os << " inside=" << joined(s.partition.frozen_inside);
  os << "\n";
  os << to_csv(p.schedule);
  os << "micro_batches " << joined(p.micro_batches) << "\nrecomputed " << p.recomputed_microbatches << "\n";
  const ReplicaLayout& l = p.layout;
  os << "layout K=" << l.K << " nodes=" << l.nodes << " gpus_per_node=" << l.gpus_per_node
     << " pipelines_per_node=" << l.pipelines_per_node << " replicas=" << l.replicas
     << " active=" << joined(l.active_ranks);
  for (const ReplicaLayout::Replica& r : l.replica)
    os << " | rank=" << r.rank << " node=" << r.node << " local=" << r.local_rank << " gpus=" << joined(r.gpus);
  os << "\nthreads worker=" << p.threads.worker << "\n";
  return os.str();
}

}  // namespace ep
