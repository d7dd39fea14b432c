#include "planner/validation.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <vector>

#include "planner/cache_policy.hpp"
#include "planner/error.hpp"
#include "planner/freeze.hpp"
#include "planner/stats.hpp"

namespace ep {

double ValidationRow::error() const {
  if (!(measured_s > 0) || !std::isfinite(measured_s))
    throw Error("validation: plan '" + plan + "': expected a measured time > 0, found " +
                std::to_string(measured_s));
  return (predicted_s - measured_s) / measured_s;
}

double mape(std::span<const ValidationRow> rows) {
  if (rows.empty()) throw Error("validation: MAPE of no plans");
  double sum = 0;
  for (const ValidationRow& r : rows) sum += std::abs(r.error());
  return sum / static_cast<double>(rows.size());
}

double max_abs_error(std::span<const ValidationRow> rows) {
  if (rows.empty()) throw Error("validation: max |error| of no plans");
  double worst = 0;
  for (const ValidationRow& r : rows) worst = std::max(worst, std::abs(r.error()));
  return worst;
}

double kendall_tau(std::span<const double> a, std::span<const double> b) {
  if (a.size() != b.size())
    throw Error("Kendall tau: expected two lists of the same size, found " +
                std::to_string(a.size()) + " and " + std::to_string(b.size()));
  if (a.size() < 2)
    throw Error("Kendall tau: expected at least 2 items, found " + std::to_string(a.size()));
  // O(n²): validation compares tens of plans.
  double concordant = 0, discordant = 0, ties_a = 0, ties_b = 0, pairs = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    for (std::size_t j = i + 1; j < a.size(); ++j) {
      ++pairs;
      const double da = a[j] - a[i], db = b[j] - b[i];
      if (da == 0) ++ties_a;
      if (db == 0) ++ties_b;
      if (da == 0 || db == 0) continue;
      (da > 0) == (db > 0) ? ++concordant : ++discordant;
    }
  if (ties_a == pairs || ties_b == pairs)
    throw Error("Kendall tau: undefined when every value of one list is equal");
  return (concordant - discordant) / std::sqrt((pairs - ties_a) * (pairs - ties_b));
}

namespace {

std::string fixed(const char* format, double v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string pad(std::string s, std::size_t width, bool right = false) {
  if (s.size() < width) s.insert(right ? 0 : s.size(), width - s.size(), ' ');
  return s;
}

std::string summary(const std::string& label, const std::vector<ValidationRow>& rows) {
  std::string out = label + " (" + std::to_string(rows.size()) + "): ";
  if (rows.empty()) return out + "none\n";
  out += "MAPE " + fixed("%.1f%%", 100 * mape(rows)) + ", max |error| " +
         fixed("%.1f%%", 100 * max_abs_error(rows)) + ", Kendall tau ";
  std::vector<double> measured, predicted;
  for (const ValidationRow& r : rows) {
    measured.push_back(r.measured_s);
    predicted.push_back(r.predicted_s);
  }
  const auto all_equal = [](const std::vector<double>& v) {
    return std::all_of(v.begin(), v.end(), [&](double x) { return x == v.front(); });
  };
  if (rows.size() < 2)
    out += "n/a (one plan)";
  else if (all_equal(measured) || all_equal(predicted))
    out += "n/a (all times equal)";
  else
    out += fixed("%.3f", kendall_tau(measured, predicted));
  return out + "\n";
}

}  // namespace

std::string format_validation(std::span<const ValidationRow> rows) {
  std::size_t w_plan = 4;
  for (const ValidationRow& r : rows) w_plan = std::max(w_plan, r.plan.size());
  std::string out = pad("plan", w_plan) + "  " + pad("set", 8) + pad("measured s", 14, true) +
                    pad("predicted s", 14, true) + pad("error", 9, true) + "\n";
  std::vector<ValidationRow> fitting, held_out;
  for (const ValidationRow& r : rows) {
    out += pad(r.plan, w_plan) + "  " + pad(r.held_out ? "held-out" : "fit", 8) +
           pad(fixed("%.4g", r.measured_s), 14, true) + pad(fixed("%.4g", r.predicted_s), 14, true) +
           pad(fixed("%+.1f%%", 100 * r.error()), 9, true) + "\n";
    (r.held_out ? held_out : fitting).push_back(r);
  }
  out += "\n" + summary("fitting plans", fitting) + summary("held-out plans", held_out);
  return out;
}

std::vector<ValidationPlan> validation_plans(const PlanContext& ctx) {
  const Config& config = ctx.config;
  const int L = config.model.num_hidden_layers, B = config.training.batch_size;
  const int I = config.cluster.gpus_per_node;
  std::vector<ValidationPlan> plans;
  for (int K = 1; K <= config.planner.K; K *= 2)
    for (int replicas = 1; replicas * K <= I; replicas *= 2)
      for (const int frozen : {0, L / 2})
        for (const bool cache : {false, true}) {
          if (cache && frozen == 0) continue;
          if (replicas > 1 && K > 1) continue;  // data parallelism is AutoDP's K = 1 on the freed devices
          for (const int M : {K, 2 * K, 4 * K}) {
            if (M > B) continue;
            ValidationPlan p;
            p.setup.partition = plan_partition(ctx, frozen, K, cache);
            p.setup.K = K;
            p.setup.M = M;
            p.setup.batch = B;
            p.setup.replicas = replicas;
            p.setup.cache_on = cache;
            p.setup.cache_writes_behind = cache && cache_writes_behind(config);
            p.setup.cache_reads_ahead = cache && cache_reads_ahead(config);
            p.setup.grad_norms = reads_grad_norms(config);
            p.program = lower_iteration(ctx, p.setup);
            if (cache) {
              IterationSetup fill = p.setup;
              fill.cache_valid_layers = 0;
              p.fill = lower_iteration(ctx, fill);
            }
            p.name = "K=" + std::to_string(K) + " M=" + std::to_string(M) + " x" + std::to_string(replicas) +
                     " frozen=" + std::to_string(frozen) + (cache ? " cache" : "");
            plans.push_back(std::move(p));
          }
        }
  return plans;
}

Config executor_validation_config(const Config& config, unsigned hardware_threads) {
  Config out = config;
  if (out.device == DeviceKind::CPU && out.cluster.shared_cores == 0)
    out.cluster.shared_cores = static_cast<int>(std::max(1u, hardware_threads));
  return out;
}

namespace {
void check_sizes(const char* what, std::size_t plans, std::size_t measured, std::size_t other,
                 const char* other_name = "simulated") {
  if (measured != plans || other != plans)
    throw Error(std::string(what) + ": " + std::to_string(plans) + " plans, " + std::to_string(measured) +
                " measured and " + std::to_string(other) + " " + other_name + " times");
}
}  // namespace

std::vector<ValidationRow> profile_rows(std::span<const ValidationPlan> plans, std::span<const double> measured_s,
                                        std::span<const double> simulated_s) {
  check_sizes("profile_rows", plans.size(), measured_s.size(), simulated_s.size());
  std::vector<ValidationRow> rows;
  for (std::size_t i = 0; i < plans.size(); ++i) rows.push_back({plans[i].name, true, measured_s[i], simulated_s[i]});
  return rows;
}

std::string format_host_queuing(std::span<const ValidationPlan> plans, std::span<const double> measured_s,
                                std::span<const double> queue_s) {
  check_sizes("host queuing", plans.size(), measured_s.size(), queue_s.size(), "queuing");
  constexpr double kPaced = 0.9;
  std::size_t w_plan = 4;
  for (const ValidationPlan& p : plans) w_plan = std::max(w_plan, p.name.size());
  std::string out = "the host's queuing per iteration (median) against the measured iteration:\n" +
                    pad("plan", w_plan) + pad("queued ms", 12, true) + pad("measured ms", 14, true) + "\n";
  for (std::size_t i = 0; i < plans.size(); ++i)
    out += pad(plans[i].name, w_plan) + pad(fixed("%.2f", 1e3 * queue_s[i]), 12, true) +
           pad(fixed("%.2f", 1e3 * measured_s[i]), 14, true) +
           (queue_s[i] >= kPaced * measured_s[i] ? "  host-paced" : "") + "\n";
  return out;
}

CombinedRounds combine_rounds(std::span<const std::vector<double>> rounds) {
  if (rounds.empty()) throw Error("combine_rounds: no measured pass");
  CombinedRounds out;
  const std::size_t n = rounds.front().size();
  for (std::size_t i = 0; i < n; ++i) {
    std::vector<double> t;
    for (const std::vector<double>& r : rounds) {
      if (r.size() != n)
        throw Error("combine_rounds: passes of " + std::to_string(n) + " and " + std::to_string(r.size()) + " plans");
      if (!(r[i] > 0)) throw Error("combine_rounds: plan " + std::to_string(i) + " measured " + std::to_string(r[i]) + " s");
      t.push_back(r[i]);
    }
    const auto [lo, hi] = std::minmax_element(t.begin(), t.end());
    out.spread.push_back(*hi / *lo - 1);
    out.median_s.push_back(median(std::move(t)));
  }
  return out;
}

FactorFit fit_group_factors(std::span<const ValidationPlan> plans, std::span<const double> measured_s,
                            std::span<const double> simulated_s) {
  check_sizes("fit_group_factors", plans.size(), measured_s.size(), simulated_s.size());
  const auto fits = [](const IterationSetup& s) { return s.M == 2 * s.K; };
  std::map<std::pair<int, int>, std::vector<double>> ratios;  // (K, replicas)
  for (std::size_t i = 0; i < plans.size(); ++i) {
    const IterationSetup& s = plans[i].setup;
    if (fits(s)) ratios[{s.K, s.replicas}].push_back(measured_s[i] / simulated_s[i]);
  }
  FactorFit fit;
  std::map<std::pair<int, int>, double> factor;
  for (const auto& [key, r] : ratios) {
    factor[key] = median(r);
    fit.groups.push_back({key.first, key.second, factor[key], r.size()});
  }
  for (std::size_t i = 0; i < plans.size(); ++i) {
    const IterationSetup& s = plans[i].setup;
    const auto f = factor.find({s.K, s.replicas});
    fit.rows.push_back({plans[i].name, !fits(s), measured_s[i], simulated_s[i] * (f == factor.end() ? 1.0 : f->second)});
  }
  return fit;
}

}  // namespace ep
