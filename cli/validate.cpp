// elasticpipe validate: run plans for real and in simulation with a fitted
// cost model; print the error table (MAPE, max error, Kendall tau). The plan
// grid and the factor fit are the planner's (planner/validation.hpp).
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <thread>

#include "cli/common.hpp"
#include "cli/exec_commands.hpp"
#include "exec/blas.hpp"
#include "exec/profiler.hpp"
#include "planner/stats.hpp"
#include "planner/validation.hpp"
#include "sim/driver.hpp"

namespace ep::cli {

namespace {

int run_validate(const ValidateArgs& a) {
  const Config loaded = load_checked_config(a.config, a.overrides);
  check_simulable(loaded);
  const Config config = executor_validation_config(loaded, std::thread::hardware_concurrency());
  if (const std::string w = exec::blas_warning(); !w.empty()) std::cerr << "WARNING: " << w << "\n";
  if (config.cluster.shared_cores != loaded.cluster.shared_cores)
    std::cout << "simulating the CPU executor: cluster.shared_cores = " << config.cluster.shared_cores << "\n";
  const AnalyticCostModel analytic(config.cluster, config.training);
  const FittedCostModel fitted = *fitted_model(a.profile, config, analytic);
  // Lowered for this machine's cores: the thread counts the executor runs them with.
  const PlanContext ctx(config, fitted, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  const std::vector<ValidationPlan> plans = validation_plans(ctx);
  std::vector<IterationProgram> programs;
  for (const ValidationPlan& p : plans) programs.push_back(p.program);
  // Passes over all plans, alternately forward and backward, so that each
  // plan's measurements are spread over the run and drift in the machine's
  // speed hits every plan alike; per plan the median pass.
  std::vector<std::vector<double>> passes, queued;
  for (int r = 0; r < a.rounds; ++r) {
    std::cout << "measuring " << plans.size() << " plans (" << a.iterations << " iterations each), pass " << r + 1
              << " of " << a.rounds << "..." << std::endl;
    std::vector<ValidationPlan> order = plans;
    if (r % 2) std::reverse(order.begin(), order.end());
    std::vector<exec::MeasuredIterations> m = exec::measure_iterations(config, order, a.iterations);
    if (r % 2) std::reverse(m.begin(), m.end());
    passes.emplace_back();
    queued.emplace_back();
    for (const exec::MeasuredIterations& p : m) passes.back().push_back(p.seconds), queued.back().push_back(p.queue_s);
  }
  const CombinedRounds combined = combine_rounds(passes);
  const std::vector<double>& measured = combined.median_s;
  std::cout << "simulating them..." << std::endl;
  sim::Simulator sim(config.cluster);
  const std::vector<double> simulated = sim::simulate_steady_iterations(config, fitted, programs, sim);
  const std::vector<ValidationRow> rows = profile_rows(plans, measured, simulated);
  std::cout << "\npredicted from the profile alone (no fitted factor: every plan is held out):\n"
            << format_validation(rows);
  if (config.device == DeviceKind::CUDA)  // on a CPU the host runs the work: every plan would be "paced"
    std::cout << "\n" << format_host_queuing(plans, measured, combine_rounds(queued).median_s);
  if (a.rounds > 1) {
    const auto worst = std::max_element(combined.spread.begin(), combined.spread.end());
    std::printf("measured: the median of %d passes; a plan's passes differ by %.1f%% (median over plans), %.1f%% at "
                "most (%s)\n",
                a.rounds, 100 * median(combined.spread), 100 * *worst,
                plans[static_cast<std::size_t>(worst - combined.spread.begin())].name.c_str());
    // An error smaller than the measurements' own disagreement is noise,
    // not the model's: said, so that nobody tunes the model to it.
    const double error = mape(rows), noise = median(combined.spread);
    if (noise > error)
      std::printf("warning: the passes disagree (%.1f%%, median over plans) more than the error above (MAPE %.1f%%): "
                  "this machine was too noisy to tell how good the prediction is; validate again on a quiet one\n",
                  100 * noise, 100 * error);
  }
  if (!a.fit_factors) return 0;
  const FactorFit fit = fit_group_factors(plans, measured, simulated);
  std::cout << "\nwith one fitted factor per (K, replicas), the M = 2K plans fitting it:\n";
  for (const GroupFactor& g : fit.groups)
    std::printf("K=%d x%d: measured/simulated factor %.3f (median of %zu fitting plans)\n", g.K, g.replicas, g.factor,
                g.fitting_plans);
  std::cout << format_validation(fit.rows);
  return 0;
}
}  // namespace

Command add_validate(CLI::App& app) {
  auto a = std::make_shared<ValidateArgs>();
  return {add_validate_options(app, *a), [a](int, char**) { return run_validate(*a); }};
}

}  // namespace ep::cli
