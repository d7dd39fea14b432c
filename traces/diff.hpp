// Aligning two runs of the same config event by event (a simulated one
// against a real one): per action kind, how far the first's durations are
// from the second's.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "traces/trace.hpp"

namespace ep::trace {

// Spans are aligned by (plan_id, replica, action name, phase): a run's many
// iterations of a plan collapse into one mean duration per action and
// phase, so a simulation that traced two iterations per plan aligns with a
// real run that traced many. The phase keeps like with like: an epoch's
// first iteration starts from idle devices and pays what later ones find
// ready (a cache read that cannot run ahead yet, the warm-up after a freeze
// step), so it is compared only with first iterations. Link spans are left
// out (a real run has no link tracks).
enum class IterationPhase { Later, First };

struct CategoryDiff {
  std::string category;
  int matched = 0;          // actions present in both
  int only_first = 0;       // present in the first trace only
  int only_second = 0;
  double first_mean_s = 0;  // mean over matched actions of their mean duration
  double second_mean_s = 0;
  double mean_abs_error_s = 0;
  double mape = 0;          // mean |first - second| / second over matched actions with second > 0
};

// One phase's iterations, where both traces hold some.
struct PhaseDiff {
  IterationPhase phase = IterationPhase::Later;
  std::vector<CategoryDiff> categories;  // in kEventCategories order, only those present
  CategoryDiff total;                    // over all matched actions of the phase; its mape weighted by time
};

struct TraceDiff {
  std::vector<PhaseDiff> phases;  // Later, then First: those both traces hold
  // Phases only one trace holds (e.g. a real run that traced only each
  // epoch's first iteration), with the trace that does: 1 or 2.
  std::vector<std::pair<IterationPhase, int>> held_by_one;
};

// Throws ep::Error when there is nothing to compare: a trace without GPU
// spans, traces of different workloads (metadata "model", "workload" and
// "batch_size", unless `any_workload`: an action's time depends on them),
// or no action in common.
[[nodiscard]] TraceDiff diff_traces(const Trace& first, const Trace& second, bool any_workload = false);
// A table for the terminal.
[[nodiscard]] std::string format_diff(const TraceDiff&, const Trace& first, const Trace& second);

// Two runs' epochs side by side (each run's rows of its trace's mode in an
// epochs.csv): what an epoch adds to the run, with the transition charged
// to its start, and its mean iteration.
struct EpochDiff {
  int epoch = 0;  // from 0, as epochs.csv counts
  int frozen_first = 0, frozen_second = 0;  // the prefix
  std::string frozen_inside_first = "-", frozen_inside_second = "-";  // as EpochMetrics::frozen_inside
  int K_first = 0, K_second = 0, replicas_first = 0, replicas_second = 0, M_first = 0, M_second = 0;
  double first_s = 0, second_s = 0;  // epoch_s: the epoch with its transition (plan_epoch_row)
  double first_iteration_s = 0, second_iteration_s = 0;
  double first_transition_s = 0, second_transition_s = 0;  // inside first_s, second_s
};
// The epochs both runs have, in order (a run cut short is compared as far
// as it goes). Throws ep::Error naming the mode when a run has no row of it.
[[nodiscard]] std::vector<EpochDiff> diff_epochs(const std::vector<EpochMetrics>& first,
                                                 const std::string& first_mode,
                                                 const std::vector<EpochMetrics>& second,
                                                 const std::string& second_mode);
// A table for the terminal: each epoch's error relative to the second run,
// the whole run's, and the largest.
[[nodiscard]] std::string format_epoch_diff(const std::vector<EpochDiff>&);
// Lines under that table for the runs' starts, in no epoch (kStartKey):
// both, with the error, where both traces have one; and where a run's
// chunk search ran in its start (kChunkSearchBeforeFirstEpochKey), which
// then did the process's one-off work. Empty where neither has either.
[[nodiscard]] std::string format_start_notes(const Trace& first, const Trace& second);
// The table of format_epoch_diff and the runs' starts as CSV at `path`
// (traces/SCHEMA.md, "Epoch diff"), for a script that compares many runs
// with one simulation (bench/sim_vs_measured.py).
void write_epoch_diff_csv(const std::vector<EpochDiff>&, std::optional<double> start_first,
                          std::optional<double> start_second, const std::string& path);

}  // namespace ep::trace
