// Aligning two runs of the same config event by event (a simulated one
// against a real one): per action kind, how far the first's durations are
// from the second's.
#pragma once

#include <string>
#include <vector>

#include "traces/trace.hpp"

namespace ep::trace {

// Spans are aligned by (plan_id, replica, action name): a run's many
// iterations of a plan collapse into one mean duration per action, so a
// simulation that traced one iteration per plan aligns with a real run that
// traced many. Link spans are left out (a real run has no link tracks).
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

struct TraceDiff {
  std::vector<CategoryDiff> categories;  // in kEventCategories order, only those present
  CategoryDiff total;                    // over all matched actions
};

// Throws ep::Error when there is nothing to compare: a trace without GPU
// spans, traces of different models (metadata "model"), or no action in
// common.
[[nodiscard]] TraceDiff diff_traces(const Trace& first, const Trace& second);
// A table for the terminal.
[[nodiscard]] std::string format_diff(const TraceDiff&, const Trace& first, const Trace& second);

}  // namespace ep::trace
