// What a transition between two plans costs (SPEC §7's dissection), and who
// sends what: the state each woken replica receives, and the weights that
// move between devices when a pipeline is repartitioned. The planner uses
// the estimate to decide (objective "time"); the simulator carries out the
// same moves on its network and charges the same fixed parts; the executor
// sends state from the sources the plan names.
#pragma once

#include <vector>

#include "planner/run_plan.hpp"

namespace ep {

struct StateMove {
  int src_gpu = 0;  // global GPU ids (node * I + gpu)
  int dst_gpu = 0;
  double bytes = 0;  // weights and optimizer state
  friend bool operator==(const StateMove&, const StateMove&) = default;
};

// Every woken rank of `next` gets a source: a replica that was active in
// `previous`, on the woken rank's node when one is, spreading the woken
// ranks round-robin over the candidates.
[[nodiscard]] std::vector<Onboarding> onboarding_sources(const ReplicaLayout& previous,
                                                         const ReplicaLayout& next,
                                                         const std::vector<int>& woken);

// Bytes that cross devices: a replica that stays active moves each sublayer
// whose device changes; a woken replica receives every stage's state from
// its source, device by device. Sorted by (src, dst), one entry per pair.
[[nodiscard]] std::vector<StateMove> state_moves(const PlanContext&, const Plan& previous, const Plan& next);

// The parts of a transition, in seconds.
struct TransitionCost {
  double state_s = 0;     // state_moves over the links (and packing, when a profile measured it)
  double contexts_s = 0;  // a process's one-off work where one starts (the run's, or woken ones): its device
                          // context and first iteration's extra, as a profile measured them, else
                          // cluster.transition.context_creation_s
  double rebuild_s = 0;   // the active group made for new ranks or lanes (cluster.transition's group formula,
                          // or a profile's rebuild scaled by it)
  double warmup_s = 0;    // first iteration after a freeze step or repartition (profile's freeze_warmup, else
                          // cluster.transition.warmup_iterations of the plan's); the run's start: its iterations
  double cache_probe_s = 0;  // AutoCache's probe at the new frozen depth, before the step is planned
  double cache_create_s = 0;  // the node's cache file, where the cache turns on (CostModel::cache_create_s)
  [[nodiscard]] double total_s() const {
    return state_s + contexts_s + rebuild_s + warmup_s + cache_probe_s + cache_create_s;
  }
};

// The cost of entering `next` from `previous` (null: the run's
// initialisation). Nothing changed: 0. The state part sums the moves'
// link times (a conservative serialisation); the simulator replaces it by
// the same moves run concurrently on its network.
[[nodiscard]] TransitionCost predict_transition(const PlanContext&, const Plan* previous, const Plan& next);

// The run's start (RunBackend::start): once its first plan is entered (or
// the plan a resumed run continues), kStartIterations iterations of the
// plan's timing program on each of its replicas at once, before its first
// epoch, and the optimizer's state made. They update nothing; they make the
// process's one-off work (kernels loaded, the step's too, library handles
// made, device and pinned host memory grown to an epoch's needs: a batch
// running, the next queued, a third assembled, the optimizer's moments)
// happen in the start rather than in the first epoch, which then runs as
// the epochs after it do, whether or not a chunk search ran before it.
inline constexpr int kStartIterations = 2;
[[nodiscard]] IterationProgram start_program(const PlanContext&, const Plan&, int epoch);
// Its cost: entering the plan from nothing (predict_transition) and the
// start's iterations of `start` (the run loop's start_program), each priced
// by `predict` as a timing run from idle devices
// (PredictionUse::ChunkCandidate): the start program's own schedule, so no
// optimizer step and no all-reduce are charged.
[[nodiscard]] TransitionCost predict_start(const PlanContext&, const Plan&, const IterationProgram& start,
                                           const IterationPredictor& predict);

// The first iteration's extra after a freeze step or a repartition (0 where
// neither changes): a profile's freeze_warmup, else warmup_iterations of
// `next`'s iteration_s.
[[nodiscard]] double predict_warmup_s(const PlanContext&, const Plan& previous, const Plan& next);

// Whether entering `next` from `previous` changes anything a back end must redo.
[[nodiscard]] bool repartitioned(const Plan& previous, const Plan& next);
// Whether the frozen set changed (the prefix or the layers frozen inside):
// what runs with autograd changes, so the executor reconfigures and warms up.
[[nodiscard]] bool refrozen(const Plan& previous, const Plan& next);

}  // namespace ep
