// Statistics for `elasticpipe validate`: how far a cost model's predicted
// iteration times are from measured ones, and whether it at least ranks the
// plans in the measured order (what the planner's choices depend on).
// Plans used to fit the model and held-out plans are reported apart: only
// the held-out error says how well the model predicts.
#pragma once

#include <span>
#include <string>

namespace ep {

struct ValidationRow {
  std::string plan;
  bool held_out = false;  // not among the plans the model was fitted on
  double measured_s = 0;
  double predicted_s = 0;
  // (predicted − measured) / measured; throws ep::Error unless measured > 0.
  [[nodiscard]] double error() const;
};

// Mean |error|, as a fraction. Throws ep::Error on no rows.
[[nodiscard]] double mape(std::span<const ValidationRow>);
// Max |error|, as a fraction. Throws ep::Error on no rows.
[[nodiscard]] double max_abs_error(std::span<const ValidationRow>);
// Kendall's tau-b, ties counted in neither concordant nor discordant pairs
// and corrected for in the denominator. Throws ep::Error on a size mismatch,
// fewer than 2 items, or a side whose values are all equal (undefined).
[[nodiscard]] double kendall_tau(std::span<const double> a, std::span<const double> b);
// Table (plan, fit/held-out, measured, predicted, error), then MAPE, max
// |error| and Kendall tau (measured vs predicted) for the fitting plans and
// for the held-out plans; "n/a" where a statistic is undefined.
[[nodiscard]] std::string format_validation(std::span<const ValidationRow>);

}  // namespace ep
