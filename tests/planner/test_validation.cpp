#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "planner/error.hpp"
#include "planner/cost_model.hpp"
#include "planner/validation.hpp"
#include "tests/planner/support.hpp"

using namespace ep;

TEST_CASE("validation error and MAPE, by hand", "[validation]") {
  const std::vector<ValidationRow> rows = {{"a", false, 1, 1.1}, {"b", false, 2, 1.8}};
  CHECK(rows[0].error() == Approx(0.1));
  CHECK(rows[1].error() == Approx(-0.1));
  CHECK(mape(rows) == Approx(0.1));
  CHECK(max_abs_error(rows) == Approx(0.1));
  const std::vector<ValidationRow> mixed = {{"a", false, 4, 5}, {"b", true, 10, 9}, {"c", true, 2, 2}};
  CHECK(mape(mixed) == Approx((0.25 + 0.1 + 0) / 3));
  CHECK(max_abs_error(mixed) == Approx(0.25));
}

TEST_CASE("Kendall tau-b, by hand", "[validation]") {
  using V = std::vector<double>;
  CHECK(kendall_tau(V{1, 2, 3, 4}, V{10, 20, 30, 40}) == Approx(1));
  CHECK(kendall_tau(V{1, 2, 3, 4}, V{4, 3, 2, 1}) == Approx(-1));
  // One discordant pair (3,4) among the 6: (5 - 1) / 6.
  CHECK(kendall_tau(V{1, 2, 3, 4}, V{1, 2, 4, 3}) == Approx(4.0 / 6));
  // Ties: a ties pair (1,2), b ties pair (2,3); of the other 4 pairs all
  // concordant. tau-b = 4 / sqrt((6 - 1)(6 - 1)) = 0.8.
  CHECK(kendall_tau(V{1, 2, 2, 3}, V{1, 2, 3, 3}) == Approx(0.8));
  // Ties and discordance: pairs (0,1) (0,2) (0,3) discordant, (1,3)
  // concordant, (1,2) tied in a, (2,3) tied in b: (1 - 3) / 5.
  CHECK(kendall_tau(V{1, 2, 2, 3}, V{3, 1, 2, 2}) == Approx(-0.4));
  // Unequal tie counts: a = {1,1,2,2} (2 ties), b = {1,2,3,4} (none);
  // concordant (0,2) (0,3) (1,2) (1,3): 4 / sqrt((6 - 2) 6).
  CHECK(kendall_tau(V{1, 1, 2, 2}, V{1, 2, 3, 4}) == Approx(4 / std::sqrt(24.0)));
  CHECK(kendall_tau(V{1, 2}, V{2, 1}) == Approx(-1));
}

TEST_CASE("validation statistics refuse bad input", "[validation]") {
  using V = std::vector<double>;
  CHECK_THROWS_WITH(kendall_tau(V{1, 2, 3}, V{1, 2}),
                    Catch::Contains("same size, found 3 and 2"));
  CHECK_THROWS_WITH(kendall_tau(V{1}, V{1}), Catch::Contains("at least 2 items, found 1"));
  CHECK_THROWS_WITH(kendall_tau(V{}, V{}), Catch::Contains("at least 2 items, found 0"));
  CHECK_THROWS_WITH(kendall_tau(V{5, 5, 5}, V{1, 2, 3}), Catch::Contains("undefined"));
  CHECK_THROWS_AS(kendall_tau(V{1, 2}, V{1}), Error);
  const std::vector<ValidationRow> none;
  CHECK_THROWS_AS(mape(none), Error);
  CHECK_THROWS_AS(max_abs_error(none), Error);
  const ValidationRow zero{"p0", false, 0, 1};
  CHECK_THROWS_WITH(zero.error(), Catch::Contains("plan 'p0': expected a measured time > 0"));
}

TEST_CASE("validation table separates fitting and held-out plans", "[validation]") {
  const std::vector<ValidationRow> rows = {{"plan0 K=4", false, 1.0, 1.1},
                                           {"plan1 K=2", false, 2.0, 1.8},
                                           {"plan2 K=1", false, 3.0, 3.0},
                                           {"plan3 K=8", true, 4.0, 5.0}};
  const std::string text = format_validation(rows);
  INFO(text);
  CHECK_THAT(text, Catch::Contains("plan0 K=4"));
  CHECK_THAT(text, Catch::Contains("held-out"));
  CHECK_THAT(text, Catch::Contains("+10.0%"));
  CHECK_THAT(text, Catch::Contains("-10.0%"));
  CHECK_THAT(text, Catch::Contains("+25.0%"));
  CHECK_THAT(text, Catch::Contains("fitting plans (3): MAPE 6.7%, max |error| 10.0%, Kendall tau 1.000"));
  CHECK_THAT(text, Catch::Contains("held-out plans (1): MAPE 25.0%, max |error| 25.0%, Kendall tau n/a"));
  const std::string only_fit = format_validation(std::span(rows).first(2));
  CHECK_THAT(only_fit, Catch::Contains("held-out plans (0): none"));
}

TEST_CASE("validation plans: every K, AutoDP's replicas, frozen depth and cache, M within the batch",
          "[validation]") {
  const Config c = test::tiny_bert();  // L = 4 on 1 x 4, planner.K = 4
  const AnalyticCostModel cost(c.cluster, c.training);
  const PlanContext ctx(c, cost);
  const std::vector<ValidationPlan> plans = validation_plans(ctx);
  REQUIRE_FALSE(plans.empty());
  std::set<std::string> names;
  for (const ValidationPlan& p : plans) {
    const IterationSetup& s = p.setup;
    CHECK(names.insert(p.name).second);  // each plan once
    CHECK((s.K == 1 || s.replicas == 1));  // replicas only with K = 1
    CHECK(s.K * s.replicas <= c.cluster.gpus_per_node);
    CHECK((s.M == s.K || s.M == 2 * s.K || s.M == 4 * s.K));
    CHECK(s.M <= c.training.batch_size);
    CHECK(s.partition.K() == s.K);
    if (s.cache_on) CHECK(s.partition.frozen_end > 0);
  }
  // Every K the config allows, and data parallelism beside it.
  for (int K = 1; K <= c.planner.K; K *= 2)
    CHECK(std::any_of(plans.begin(), plans.end(), [&](const ValidationPlan& p) { return p.setup.K == K; }));
  CHECK(std::any_of(plans.begin(), plans.end(), [](const ValidationPlan& p) { return p.setup.replicas > 1; }));
}

TEST_CASE("validation config: the CPU executor's threads share this machine's cores unless the config says",
          "[validation]") {
  Config c = test::tiny_bert();
  c.device = DeviceKind::CPU;
  c.cluster.shared_cores = 0;
  CHECK(executor_validation_config(c, 6).cluster.shared_cores == 6);
  CHECK(executor_validation_config(c, 0).cluster.shared_cores == 1);
  c.cluster.shared_cores = 3;
  CHECK(executor_validation_config(c, 6).cluster.shared_cores == 3);
}

TEST_CASE("group factors: the median ratio of the M = 2K plans predicts the rest of their group", "[validation]") {
  const auto plan = [](int K, int M, int replicas) {
    ValidationPlan p;
    p.name = std::to_string(K) + "/" + std::to_string(M) + "/" + std::to_string(replicas);
    p.setup.K = K;
    p.setup.M = M;
    p.setup.replicas = replicas;
    return p;
  };
  const std::vector<ValidationPlan> plans = {plan(1, 2, 1), plan(1, 2, 1), plan(1, 2, 1), plan(1, 4, 1),
                                             plan(2, 4, 1), plan(2, 8, 1), plan(1, 4, 2)};
  const std::vector<double> measured = {1.1, 1.3, 1.2, 3.0, 2.0, 5.0, 7.0};
  const std::vector<double> simulated = {1.0, 1.0, 1.0, 2.0, 1.0, 4.0, 7.0};
  const FactorFit fit = fit_group_factors(plans, measured, simulated);
  REQUIRE(fit.groups.size() == 2);  // (1,1) and (2,1); (1,2) has no fitting plan
  CHECK(fit.groups[0].K == 1);
  CHECK(fit.groups[0].factor == Approx(1.2));  // median of 1.1, 1.3, 1.2
  CHECK(fit.groups[0].fitting_plans == 3);
  CHECK(fit.groups[1].factor == Approx(2.0));
  REQUIRE(fit.rows.size() == plans.size());
  CHECK_FALSE(fit.rows[0].held_out);
  CHECK(fit.rows[3].held_out);
  CHECK(fit.rows[3].predicted_s == Approx(2.4));  // 2.0 x 1.2
  CHECK(fit.rows[5].predicted_s == Approx(8.0));
  CHECK(fit.rows[6].predicted_s == Approx(7.0));  // no factor: 1
  CHECK_THROWS_AS(fit_group_factors(plans, measured, {}), Error);
}

TEST_CASE("profile rows: every plan held out, predicted as simulated", "[validation]") {
  std::vector<ValidationPlan> plans(3);
  plans[0].name = "a", plans[1].name = "b", plans[2].name = "c";
  const std::vector<double> measured = {1, 2, 3}, simulated = {1.5, 2, 2.5};
  const std::vector<ValidationRow> rows = profile_rows(plans, measured, simulated);
  REQUIRE(rows.size() == 3);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    CHECK(rows[i].plan == plans[i].name);
    CHECK(rows[i].held_out);
    CHECK(rows[i].measured_s == measured[i]);
    CHECK(rows[i].predicted_s == simulated[i]);
  }
  CHECK_THAT(format_validation(rows), Catch::Contains("fitting plans (0): none") && Catch::Contains("held-out plans (3)"));
  CHECK_THROWS_AS(profile_rows(plans, measured, std::vector<double>{1.0}), Error);
}

TEST_CASE("rounds: per plan the median pass and the spread between passes", "[validation]") {
  const std::vector<std::vector<double>> passes = {{1.0, 2.0, 4.0}, {1.5, 2.0, 3.0}, {1.2, 2.0, 5.0}};
  const CombinedRounds c = combine_rounds(passes);
  REQUIRE(c.median_s.size() == 3);
  CHECK(c.median_s[0] == 1.2);
  CHECK(c.median_s[1] == 2.0);
  CHECK(c.median_s[2] == 4.0);
  CHECK(c.spread[0] == Approx(0.5));
  CHECK(c.spread[1] == 0.0);
  CHECK(c.spread[2] == Approx(5.0 / 3 - 1));
  // An even count: the upper median, a measured value.
  const std::vector<std::vector<double>> two = {{1.0}, {3.0}};
  CHECK(combine_rounds(two).median_s[0] == 3.0);
  // One pass: itself, no spread.
  const std::vector<std::vector<double>> one = {{0.7, 0.9}};
  CHECK(combine_rounds(one).median_s == one.front());
  CHECK(combine_rounds(one).spread == std::vector<double>{0.0, 0.0});
  CHECK_THROWS_WITH(combine_rounds(std::vector<std::vector<double>>{}), Catch::Contains("no measured pass"));
  CHECK_THROWS_WITH(combine_rounds(std::vector<std::vector<double>>{{1.0, 2.0}, {1.0}}),
                    Catch::Contains("passes of 2 and 1 plans"));
  CHECK_THROWS_WITH(combine_rounds(std::vector<std::vector<double>>{{1.0, 0.0}}), Catch::Contains("plan 1 measured"));
}

TEST_CASE("host queuing: a plan is host-paced where queuing took at least 90% of its iteration") {
  std::vector<ValidationPlan> plans(3);
  plans[0].name = "K=1 M=1 x1 frozen=0";
  plans[1].name = "K=1 M=4 x1 frozen=0";
  plans[2].name = "K=1 M=8";
  const std::vector<double> measured = {0.0490, 0.0738, 0.0800}, queued = {0.0040, 0.0700, 0.0725};
  const std::string t = format_host_queuing(plans, measured, queued);
  const auto line_of = [&](const std::string& name) {
    const std::size_t at = t.find(name + " ");
    REQUIRE(at != std::string::npos);
    return t.substr(at, t.find('\n', at) - at);
  };
  CHECK_THAT(line_of("K=1 M=1 x1 frozen=0"), Catch::Contains("4.00") && Catch::Contains("49.00") &&
                                                    !Catch::Contains("host-paced"));
  CHECK_THAT(line_of("K=1 M=4 x1 frozen=0"), Catch::Contains("70.00") && Catch::EndsWith("host-paced"));
  CHECK_THAT(line_of("K=1 M=8"), Catch::EndsWith("host-paced"));  // 91%
  CHECK_THROWS_WITH(format_host_queuing(plans, measured, std::vector<double>{0.1}),
                    Catch::Contains("3 plans, 3 measured and 1 queuing times"));
}
