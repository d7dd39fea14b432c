// The one run loop: a training's freeze steps, plans, transitions and
// epochs, walked in order for any back end. The loop decides what happens
// when (the freeze policy's step, when the cache is probed, which plan
// each epoch runs); a back end only carries each step out: the simulator
// prices it, the executor trains it.
#pragma once

#include <optional>
#include <vector>

#include "planner/run_plan.hpp"

namespace ep {

// What every process must plan freeze step T from, alike: the frozen count
// the freeze policy allowed and, where the step probes the cache
// (RunPlanner::probes), the measured cache.
struct StepInputs {
  int frozen_layers = 0;
  std::optional<MeasuredCache> cache;
};

class RunBackend {
 public:
  virtual ~RunBackend() = default;
  // Whether this process decides the freeze steps (the simulator; rank 0
  // of a training job) or follows the one that does.
  [[nodiscard]] virtual bool decides() const { return true; }
  // Decider: the per-layer gradient norms measured since the last freeze
  // step (mean over iterations); empty where none are measured (planning
  // ahead: the policy replays a trace or uses the alpha bound).
  virtual std::vector<double> grad_norms() = 0;
  // Decider: the cache read and frozen forward per batch at this frozen
  // depth (AutoCache decides on them); nullopt where nothing is measured.
  virtual std::optional<MeasuredCache> probe_cache(int frozen_layers) = 0;
  // Decider: the step's inputs and its plan, for the followers.
  virtual void publish(int /*step*/, const StepInputs&, const Plan&) {}
  // Follower: the decider's inputs of step T (blocks until they come).
  virtual StepInputs follow(int step);
  // Before freeze step T is planned (a back end may start a clock).
  virtual void begin_step(int /*step*/) {}
  // Enter `plan` from `previous` (null: the first plan, or the plan a
  // resumed run continues): state moves, repartition, group rebuild.
  virtual void enter(const Plan& plan, const Plan* previous) = 0;
  // The run's start, once the first plan (or the plan a resumed run
  // continues) is entered and before its first epoch, `epoch`: the
  // executor runs start_program (planner/transition.hpp), the simulator
  // prices it (predict_start).
  virtual void start(const Plan& /*plan*/, int /*epoch*/) {}
  // Run epoch `epoch` of `plan`: plan.program_for(epoch), in cache role
  // plan.cache_role(epoch).
  virtual void run_epoch(const Plan& plan, int epoch) = 0;
};

// Whether the config's AutoCache may probe the cache at `frozen_layers`
// before a step is planned (it weighs the cache by measurement where AutoPipe
// repacks); RunPlanner::probes decides whether a step does.
[[nodiscard]] bool probes_cache(const Config&, int frozen_layers);

// Walks the training: for T = 0..freeze_steps(), the step's inputs (decided
// or followed), its plan, entered, and its epochs. A run that resumes
// (planner already holding the plans up to the checkpoint's) continues the
// last of them from `first_epoch` without planning it again.
void run_training(RunPlanner&, RunBackend&, int first_epoch = 0);

}  // namespace ep
