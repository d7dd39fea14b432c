// The contract between the planner and its back ends. A back end (the
// simulator, the executor) runs iterations described by an IterationSetup:
// the schedule from schedule_options, each action's time and bytes from
// iteration_costs. Where the planner needs a measured time, it asks an
// IterationPredictor and keeps the decision itself; predict_iteration is
// the planner's own answer (its event-driven timeline under the cost model).
#pragma once

#include <functional>
#include <vector>

#include "planner/autodp.hpp"
#include "planner/cost_model.hpp"
#include "planner/memory.hpp"
#include "planner/model_spec.hpp"
#include "planner/partition.hpp"
#include "planner/schedule.hpp"
#include "planner/timeline.hpp"

namespace ep {

// What the planner works from: the validated config, the model it implies
// and the cost model that predicts time.
struct PlanContext {
  const Config& config;
  ModelSpec spec;
  const CostModel& cost;
  // Cores of the machine that runs one node's pipelines (the executor's);
  // 0 where nothing runs them (planning, simulation): programs then carry
  // no thread counts.
  int host_cores = 0;

  PlanContext(const Config& c, const CostModel& m, int cores = 0)
      : config(c), spec(build_model_spec(c.model, c.training.precision)), cost(m), host_cores(cores) {}
};

// torch.chunk would give ceil-sized micro-batches and possibly fewer than M
// of them; the planner splits as evenly as possible instead: the first
// batch % M micro-batches carry one sample more. Every back end uses this.
[[nodiscard]] std::vector<int> micro_batch_sizes(int batch, int M);

// One iteration of one pipeline replica, as the planner predicts it.
struct IterationSetup {
  Partition partition;  // K * v stages
  int K = 1;
  int v = 1;
  int M = 1;
  int replicas = 1;
  bool replicas_span_nodes = false;
  bool cache_on = false;
  CacheTier cache_tier = CacheTier::HostMemory;
  // -1: steady state (with the cache on, every micro-batch reads it). >= 0:
  // an epoch that fills the cache, whose entries hold the output of this
  // many frozen layers: 0 computes F_frozen and writes (FZ, CW); more reads
  // each stale entry, runs it through the newly frozen layers only, and
  // writes it back (CR, FZ, CW), so no sample passes a frozen layer twice.
  int cache_valid_layers = -1;
  // Samples per pipeline and iteration (pipeline_batch(): training.batch_size
  // unless batch_policy = "global" splits a fixed global batch).
  int batch = 0;
  // Cache writes stored behind the device (cache_writes_behind(), from
  // exec.device): it only queues each CacheWrite and goes on.
  bool cache_writes_behind = false;
  // Cache reads run ahead of the device (cache_reads_ahead()): each CacheRead
  // is copied while the device runs the previous iteration; the device
  // waits for it only where the reads take longer than that.
  bool cache_reads_ahead = false;
  // The optimizer step computes the gradients' norms: only where the run's
  // freeze policy reads them (reads_grad_norms(), freeze.hpp).
  bool grad_norms = false;
  friend bool operator==(const IterationSetup&, const IterationSetup&) = default;
};
[[nodiscard]] ScheduleOptions schedule_options(const PlanContext&, const IterationSetup&);

// Intra-op threads of each stage worker where the node's pipelines share
// the host's cores: each process (one pipeline) takes cores / pipelines,
// each of its K stage workers that divided by K (or
// exec.threads_per_worker); at least 1. 0 where no host is given. (The
// process's other threads run with one: exec/pipeline.hpp, on_worker.)
struct WorkerThreads {
  int worker = 0;
  friend bool operator==(const WorkerThreads&, const WorkerThreads&) = default;
};
[[nodiscard]] WorkerThreads worker_threads(const Config&, int K, int pipelines_per_node, int host_cores);

// An iteration lowered for a back end: everything it carries out, decided
// here. Back ends run the schedule's actions on these micro-batches, with
// this recomputation, these threads and this replica placement; none
// rebuilds or re-derives any of it.
struct IterationProgram {
  IterationSetup setup;             // what it is: costs, cache depth (setup.cache_valid_layers)
  Schedule schedule;                // lowered: sends and receives placed (schedule.hpp)
  std::vector<int> micro_batches;   // samples per micro-batch (micro_batch_sizes)
  // Micro-batches 0 .. recomputed_microbatches-1 rerun their forward in
  // the backward (training.checkpointing; recomputes(), memory.hpp).
  int recomputed_microbatches = 0;
  ReplicaLayout layout;             // the replicas running it (rank and GPUs per stage)
  WorkerThreads threads;            // with PlanContext::host_cores
  [[nodiscard]] bool empty() const { return schedule.devices.empty(); }
  [[nodiscard]] bool recomputes(int microbatch) const { return microbatch < recomputed_microbatches; }
  friend bool operator==(const IterationProgram&, const IterationProgram&) = default;
};
// Lowers `setup`: its schedule, micro-batch split, recomputation, replica
// layout (replica_layout(config, K, replicas)) and thread counts.
[[nodiscard]] IterationProgram lower_iteration(const PlanContext&, const IterationSetup&);
// What a back end that times a chunk-search candidate on one replica alone
// runs (the executor, before the replicas exist): the candidate's
// micro-batches, recomputation and threads, updating nothing: no
// all-reduce (its buckets do not depend on M), no OptimizerStep, the frozen
// prefix recomputed (cache entries may not exist yet).
[[nodiscard]] IterationProgram timing_program(const PlanContext&, const IterationProgram& candidate);

// What each action of the iteration's schedule costs under the cost model:
// its duration (every kind) and the bytes it moves (transfers, all-reduce
// buckets, cache reads and writes; 0 for compute). Back ends that model
// transfers themselves (the simulator) take the bytes; the others the time.
//
// A CacheWrite stored behind the device (setup.cache_writes_behind) costs
// the device nothing: `behind` is the time the cache's writer then takes
// to store it. Likewise a CacheRead run ahead (setup.cache_reads_ahead):
// `behind` is its copy's time, beside the device. 0 for every other action.
//
// A cache copy (CR, CW) alone on its node takes the cost model's
// cache_read_s / cache_write_s: `alone` (0 for every other action). Its
// duration (or behind) is that or, when the node's replicas copy at once
// through the node's memory link (and disk) and share it, copiers ·
// bytes / the node's bandwidth: each replica's stage 0 copies at the same
// point of the same schedule. The simulator shares the links itself and
// runs a copy at most at bytes / alone.
struct IterationCosts {
  DurationFn duration;
  std::function<double(const Action&)> bytes;
  DurationFn behind;
  DurationFn alone;
};
// Replicas of `setup` that copy cache entries at once on one node (their
// stage-0 GPUs): replicas / nodes, at least 1.
[[nodiscard]] int cache_copiers_per_node(const ClusterSpec&, const IterationSetup&);
[[nodiscard]] IterationCosts iteration_costs(const PlanContext&, const IterationSetup&);
// The planner's own timing: the schedule's dependency graph under the cost
// model. With cluster.shared_cores > 0 the node's busy workers (K per
// pipeline) share that many cores: compute stretches by workers / cores
// when there are more (bubbles, where fewer run at once, are ignored).
// Writes stored behind a device overlap its work, but iterations run back
// to back cannot outpace the writer: the makespan is at least each
// device's writes stored one after another.
[[nodiscard]] Timeline predict_iteration(const PlanContext&, const IterationSetup&);

// Chunk search and the run planner ask a predictor how long iterations
// take, several at once (a back end may answer them in parallel); the
// default is predict_iteration (the cost model on the schedule's
// dependency graph); the simulator supplies SimGrid's answers instead. The
// decision (which M) stays in the planner.
struct IterationPrediction {
  double iteration_s = 0;
  double bubble_fraction = 0;
};
// What a prediction is for: ranking chunk-search candidates (a profiler
// times a few iterations of each), or a plan's throughput (steady state).
enum class PredictionUse { ChunkCandidate, Plan };
using IterationPredictor = std::function<std::vector<IterationPrediction>(
    const std::vector<IterationProgram>&, PredictionUse)>;
[[nodiscard]] IterationPredictor analytic_predictor(const PlanContext&);

}  // namespace ep
