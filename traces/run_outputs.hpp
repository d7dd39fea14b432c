// The executor's own output files, beside the shared trace, epoch CSV and
// summary (trace.hpp): the per-iteration losses (iterations.csv), the
// measured transition costs (transitions.json), the training state a
// checkpoint carries (run state JSON), and a reader of the plans file
// (plan.json, written by the planner's to_json, which needs the planner's
// code). Schema: traces/SCHEMA.md, sections 6 to 9.
#pragma once

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "planner/step_inputs.hpp"
#include "traces/trace.hpp"

namespace ep::trace {

// What one transition cost, dissected (rank 0's view of the executor).
struct TransitionCost {
  int epoch = 0;
  int frozen_before = 0, frozen_after = 0;
  int K_before = 0, K_after = 0;
  int replicas_before = 0, replicas_after = 0;
  double cache_probe_s = 0;     // AutoCache's probe at the new frozen depth
  double planning_s = 0;        // freeze decision, chunk timing, RunPlanner
  double state_transfer_s = 0;  // onboarding the woken replicas (pack, send, unpack)
  double rebuild_s = 0;         // tearing down and rebuilding the active process group
  double repartition_s = 0;     // moving sublayers, schedules, cache files, replica check
  double warmup_s = 0;          // first iteration of the new plan minus the median of the next ones
  // Why a warm-up, in part (inside warmup_s, not added to the total): the
  // new plan's first batch assembled while the iteration before ran (or
  // after it, the device waiting), and the host's wait for it.
  bool first_batch_prefetched = false;
  double first_batch_wait_s = 0;
  [[nodiscard]] double total_s() const {
    return cache_probe_s + planning_s + state_transfer_s + rebuild_s + repartition_s + warmup_s;
  }
  friend bool operator==(const TransitionCost&, const TransitionCost&) = default;
};

// Where a training stands apart from weights and optimizer state: what a
// checkpoint stores and what a woken replica receives.
struct RunState {
  int epoch = 0;
  std::int64_t consumed = 0;   // sampler slots of every node's order used this epoch
  std::int64_t iteration = 0;  // iterations run this epoch
  std::vector<double> interval_norm_sum;
  std::int64_t interval_iterations = 0;
  // Per freeze step T so far, the run loop's inputs (the frozen count
  // allowed, the cache measured where the step probed it): the record a
  // resumed run plans its steps from again.
  std::vector<StepInputs> steps;
  std::map<int, std::vector<double>> chunk_times;   // K -> measured iteration time per candidate M
  double train_s = 0;  // the run's time so far: each process's start and every epoch with its transition
  // The running epoch's totals (global: loss and counts are all-reduced per iteration).
  double epoch_loss_sum = 0;
  std::int64_t epoch_real = 0, epoch_correct = 0;
  double epoch_elapsed_s = 0;
  // What the run has recorded so far.
  std::vector<EpochMetrics> epochs;
  std::vector<TransitionCost> transitions;
  std::vector<double> iteration_losses;         // every iteration, in order
  std::vector<std::vector<double>> grad_norms;  // per freeze step T = 1.., per layer
};

// Writers take `path` to name the file in errors; readers throw ep::Error
// naming the file, the line or key, what was expected and what was found.

// iterations.csv: "iteration,loss", then one row per iteration, losses to
// 9 significant digits (a float's precision: reading gives that back).
void write_iterations_csv(const std::vector<double>& losses, std::ostream& out, const std::string& path);
std::vector<double> read_iterations_csv(const std::string& path);

// transitions.json: an array of TransitionCost objects (with total_s).
void write_transitions_json(const std::vector<TransitionCost>& transitions, std::ostream& out,
                            const std::string& path);
std::vector<TransitionCost> read_transitions_json(const std::string& path);

// The run state as JSON text (a checkpoint embeds it); `where` names its
// place in errors, e.g. "checkpoint DIR: progress".
[[nodiscard]] std::string run_state_json(const RunState& state);
RunState parse_run_state(const std::string& json_text, const std::string& where);

// plan.json (schema elasticpipe.plan/2): the fields a reader of a run's
// plans relies on, checked strictly; the planner's to_json writes the file.
struct PlanRecord {
  int id = 0, freeze_step = 0;
  int first_epoch = 0, end_epoch = 0;
  int frozen_layers = 0, K = 0, M = 0, replicas = 0;
  std::vector<int> frozen_inside;  // layers frozen past the prefix (none in a plan/1 file)
  bool cache = false;
  double iteration_s = 0;
};
struct PlanFile {
  std::string config, cost_model, objective;
  int L = 0, K0 = 0;
  std::vector<PlanRecord> plans;
};
PlanFile read_plan_json(const std::string& path);

}  // namespace ep::trace
