// Statistics for `elasticpipe validate`: how far a cost model's predicted
// iteration times are from measured ones, and whether it at least ranks the
// plans in the measured order (what the planner's choices depend on).
// Plans used to fit the model and held-out plans are reported apart: only
// the held-out error says how well the model predicts.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "planner/autopipe.hpp"

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

// The plans `validate` measures and predicts: K = 1, 2, 4, ... up to
// planner.K; AutoDP's data-parallel plans (K = 1 on 1, 2, 4, ... replicas
// within a node); no frozen layer or half of them, the latter with the
// cache on and off; M = K, 2K, 4K within the batch.
struct ValidationPlan {
  std::string name;  // "K=2 M=4 x1 frozen=6 cache"
  IterationSetup setup;
  IterationProgram program;  // setup, lowered (with the context's host cores)
  IterationProgram fill;     // with the cache on: the iteration that fills it before the measured ones
};
[[nodiscard]] std::vector<ValidationPlan> validation_plans(const PlanContext&);

// The config a validation predicts the CPU executor with: its stage
// workers are threads sharing this machine's cores, so unless the config
// says how many cores they share, they share `hardware_threads`.
[[nodiscard]] Config executor_validation_config(const Config&, unsigned hardware_threads);

// The profile alone: every plan held out, predicted = simulated. Throws
// ep::Error unless the three lists have the same length.
[[nodiscard]] std::vector<ValidationRow> profile_rows(std::span<const ValidationPlan>,
                                                      std::span<const double> measured_s,
                                                      std::span<const double> simulated_s);

// On a GPU, each measured plan's median time queuing an iteration on the
// host against its measured iteration, "host-paced" where queuing took at
// least 90% of it: the device then waited for launches, which the profile's
// per-action times hold only as far as they were host-bound when timed.
// Throws ep::Error unless the three lists have the same length.
[[nodiscard]] std::string format_host_queuing(std::span<const ValidationPlan>, std::span<const double> measured_s,
                                              std::span<const double> queue_s);

// Repeated passes over the plans (`validate --rounds`), so that a machine
// whose speed drifts over minutes does not decide the figure: per plan the
// median of its passes (the upper one for an even count: always a measured
// value) and its spread, max / min − 1. Throws ep::Error on no pass, passes
// of different lengths or a time that is not > 0.
struct CombinedRounds {
  std::vector<double> median_s;
  std::vector<double> spread;
};
[[nodiscard]] CombinedRounds combine_rounds(std::span<const std::vector<double>> rounds);

// One measured/predicted factor per (K, replicas) group: the median ratio
// over the group's plans with M = 2K, which fit it; the other plans are
// held out and predicted with it (a group without fitting plans keeps 1).
struct GroupFactor {
  int K = 0;
  int replicas = 0;
  double factor = 1;
  std::size_t fitting_plans = 0;
};
struct FactorFit {
  std::vector<GroupFactor> groups;  // in (K, replicas) order
  std::vector<ValidationRow> rows;  // per plan, predicted = simulated x its group's factor
};
// Throws ep::Error unless the three lists have the same length.
[[nodiscard]] FactorFit fit_group_factors(std::span<const ValidationPlan>, std::span<const double> measured_s,
                                          std::span<const double> simulated_s);

}  // namespace ep
