// The one run loop: a training's freeze steps, plans, transitions and
// epochs, walked in order for any back end. The loop decides what happens
// when (the freeze policy's step, when the cache is probed, which plan
// each epoch runs); a back end only carries each step out: the simulator
// prices it, the executor trains it.
#pragma once

#include <optional>
#include <vector>

#include "planner/run_plan.hpp"
#include "planner/step_inputs.hpp"

namespace ep {

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
  // continues) is entered and before its first epoch, `epoch`: `program`
  // is its start_program (planner/transition.hpp), which the executor runs
  // kStartIterations times.
  virtual void start(const Plan& /*plan*/, const IterationProgram& /*program*/, int /*epoch*/) {}
  // Run epoch `epoch` of `plan`: plan.program_for(epoch), in cache role
  // plan.cache_role(epoch).
  virtual void run_epoch(const Plan& plan, int epoch) = 0;
};

// One freeze step as the loop walked it: what it was planned from, the plan
// entered and the one it was entered from, the run's start where it came in
// this step, and the epochs the plan ran (each in plan.cache_role(epoch)).
struct StepRecord {
  int step = 0;                // freeze step T
  StepInputs inputs;           // a resumed run's first step: the plan's frozen_allowed, nothing measured
  int plan = 0;                // the plan entered: its id, an index of RunPlan::plans
  int previous = -1;           // the plan it was entered from; -1: from nothing (the run's first, a resumed run's)
  int start_epoch = -1;        // the run's start ran before this epoch; -1: not in this step
  IterationProgram start;      // the start's program (start_program), where start_epoch >= 0
  std::vector<int> epochs;     // run under the plan, in order
};

// A training as the loop walked it, in order: what a back end carried out
// and what the simulator prices.
struct RunRecord {
  std::vector<StepRecord> steps;
};

// Whether the config's AutoCache may probe the cache at `frozen_layers`
// before a step is planned (it weighs the cache by measurement where AutoPipe
// repacks); RunPlanner::probes decides whether a step does.
[[nodiscard]] bool probes_cache(const Config&, int frozen_layers);

// Walks the training: for T = 0..freeze_steps(), the step's inputs (decided
// or followed), its plan, entered, and its epochs; returns the walk. A run
// that resumes (planner already holding the plans up to the checkpoint's,
// replay_steps) continues the last of them from `first_epoch` without
// planning it again.
RunRecord run_training(RunPlanner&, RunBackend&, int first_epoch = 0);

// The training walked ahead of time, nothing measured and nothing run (a
// gradient-norm policy without recorded norms plans with the alpha bound):
// the planner then holds the plans.
RunRecord walk_ahead(RunPlanner&);

// Plans steps 0.. again from their recorded inputs, in order, as the run
// loop planned them (a resumed run: the same plans as the interrupted one,
// given the same chunk timings).
void replay_steps(RunPlanner&, const std::vector<StepInputs>&);

}  // namespace ep
