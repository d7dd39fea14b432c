// Freeze policies (SPEC §2): Eq. 1's geometric bound, its rounding and cap,
// the gradient-norm policy, freeze timelines from a config, and the
// gradient-norm trace reader.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "planner/config.hpp"
#include "planner/freeze.hpp"
#include "planner/run_loop.hpp"
#include "planner/run_plan.hpp"
#include "tests/planner/support.hpp"

using namespace ep;
using namespace ep::test;

namespace {



Config tiny(const Overrides& o = {}) { return tiny_bert(o); }

constexpr FreezeRounding kRoundings[] = {FreezeRounding::Floor, FreezeRounding::Round,
                                         FreezeRounding::Ceil};

// alpha in (0, 1) in steps of 1/1000.
double random_alpha(std::mt19937& rng) { return static_cast<double>(rng() % 999 + 1) / 1000.0; }

// alpha_bound applied T = 1..steps times from 0.
std::vector<int> alpha_path(int L, double alpha, FreezeRounding r, int min_active, int steps) {
  std::vector<int> f{0};
  for (int T = 1; T <= steps; ++T) f.push_back(alpha_bound(L, f.back(), alpha, r, min_active));
  return f;
}

PlannerConfig planner(double alpha, FreezeRounding r, int min_active) {
  PlannerConfig p;
  p.alpha = alpha;
  p.freeze_rounding = r;
  p.min_active_layers = min_active;
  return p;
}

// Eq. 1's second term, computed independently: the first active layer
// with the smallest norm, j*, freezes layers 0..j* (j* + 1 layers).
int converged_count(const std::vector<double>& g, int frozen_before) {
  int best = frozen_before;
  for (int l = frozen_before + 1; l < static_cast<int>(g.size()); ++l)
    if (g[l] < g[best]) best = l;
  return best + 1;
}

// The Error message of load_grad_norm_trace, or "" when it did not throw.
std::string trace_error(const std::string& path, int L) {
  try {
    (void)load_grad_norm_trace(path, L);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// ---------------------------------------------------------------------------
// Eq. 1's bound on real numbers

TEST_CASE("alpha bound: closed form equals the recursion on real numbers", "[freeze]") {
  // Hand values: L = 12, alpha = 1/3: 4, 12 (1 - 4/9) = 6.667, 12 (1 - 8/27) = 8.444.
  CHECK(alpha_bound_real(12, 0, 1.0 / 3) == Approx(4.0));
  CHECK(alpha_bound_real(12, 4, 1.0 / 3) == Approx(12.0 * 5 / 9));
  CHECK(alpha_bound_closed_form(12, 0, 1.0 / 3) == 0.0);
  CHECK(alpha_bound_closed_form(12, 1, 1.0 / 3) == Approx(4.0));
  CHECK(alpha_bound_closed_form(12, 2, 1.0 / 3) == Approx(12.0 * 5 / 9));
  CHECK(alpha_bound_closed_form(12, 3, 1.0 / 3) == Approx(12.0 * 19 / 27));

  std::mt19937 rng(20210701);
  for (int trial = 0; trial < 3000; ++trial) {
    const int L = 1 + static_cast<int>(rng() % 48);
    const double alpha = random_alpha(rng);
    const int T = static_cast<int>(rng() % 21);
    double x = 0;
    for (int t = 0; t < T; ++t) x = alpha_bound_real(L, x, alpha);
    INFO("L=" << L << " alpha=" << alpha << " T=" << T);
    CHECK(x == Approx(alpha_bound_closed_form(L, T, alpha)).epsilon(1e-9).margin(1e-12));
    CHECK(x <= L);
  }
}

// ---------------------------------------------------------------------------
// The rounded, capped bound: the alpha policy

TEST_CASE("alpha policy: hand path for L=12, alpha=1/3", "[freeze]") {
  // Floor: 4, 4+8/3=6.67->6, 6+2=8, 8+4/3=9.33->9, 9+1=10, 10+2/3=10.67->10:
  // stuck at 10 since alpha * 2 active layers < 1.
  CHECK(alpha_path(12, 1.0 / 3, FreezeRounding::Floor, 1, 8) ==
        std::vector<int>{0, 4, 6, 8, 9, 10, 10, 10, 10});
  // Round: 4, 6.67->7, 7+5/3=8.67->9, 10, 10.67->11 = L - 1 (the cap).
  CHECK(alpha_path(12, 1.0 / 3, FreezeRounding::Round, 1, 7) ==
        std::vector<int>{0, 4, 7, 9, 10, 11, 11, 11});
  CHECK(alpha_path(12, 1.0 / 3, FreezeRounding::Ceil, 1, 7) ==
        std::vector<int>{0, 4, 7, 9, 10, 11, 11, 11});
  // The cap keeps min_active layers active.
  CHECK(alpha_path(12, 1.0 / 3, FreezeRounding::Floor, 3, 6) ==
        std::vector<int>{0, 4, 6, 8, 9, 9, 9});
  CHECK(alpha_path(12, 1.0 / 3, FreezeRounding::Ceil, 12, 3) == std::vector<int>{0, 0, 0, 0});
  // Exact products round as the value they stand for (3 * (1/3) = 1).
  CHECK(alpha_bound(3, 0, 1.0 / 3, FreezeRounding::Floor, 1) == 1);
  CHECK(alpha_bound(3, 0, 1.0 / 3, FreezeRounding::Ceil, 1) == 1);
  CHECK(alpha_bound(10, 0, 0.3, FreezeRounding::Ceil, 1) == 3);
  CHECK(alpha_bound(10, 0, 0.3, FreezeRounding::Floor, 1) == 3);
  // 0.57 * 100 = 56.99999999999999 and 0.28 * 25 = 7.000000000000001 in
  // doubles: they still round as 57 and 7.
  CHECK(alpha_bound(100, 0, 0.57, FreezeRounding::Floor, 1) == 57);
  CHECK(alpha_bound(25, 0, 0.28, FreezeRounding::Ceil, 1) == 7);
  CHECK(alpha_bound(26, 1, 0.56, FreezeRounding::Ceil, 1) == 15);
  CHECK(alpha_bound(10, 0, 0.25, FreezeRounding::Round, 1) == 3);  // 2.5 rounds half away from 0

  const auto policy = make_alpha_policy(12, planner(1.0 / 3, FreezeRounding::Floor, 1));
  CHECK(policy->name() == "alpha");
  CHECK_FALSE(policy->needs_grad_norms());
  std::vector<int> via_policy{0};
  for (int T = 1; T <= 8; ++T) via_policy.push_back(policy->next(T, via_policy.back(), {}));
  CHECK(via_policy == std::vector<int>{0, 4, 6, 8, 9, 10, 10, 10, 10});
}

TEST_CASE("alpha policy: bottom-up, capped, floor below the real bound, ceil above floor",
          "[freeze]") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 1500; ++trial) {
    const int L = 1 + static_cast<int>(rng() % 48);
    const double alpha = random_alpha(rng);
    const int min_active = 1 + static_cast<int>(rng() % L);
    const int cap = L - min_active;
    const int steps = 30;
    INFO("L=" << L << " alpha=" << alpha << " min_active=" << min_active);
    const auto floor = alpha_path(L, alpha, FreezeRounding::Floor, min_active, steps);
    const auto round = alpha_path(L, alpha, FreezeRounding::Round, min_active, steps);
    const auto ceil = alpha_path(L, alpha, FreezeRounding::Ceil, min_active, steps);
    for (int T = 1; T <= steps; ++T) {
      INFO("T=" << T);
      for (const auto* path : {&floor, &round, &ceil}) {
        const auto& f = *path;
        REQUIRE(f[T] >= f[T - 1]);  // bottom-up: never unfreezes
        REQUIRE(f[T] <= cap);
      }
      // Floor never exceeds the real bound, per step and unrolled.
      REQUIRE(floor[T] <= alpha_bound_real(L, floor[T - 1], alpha) + 1e-9);
      REQUIRE(floor[T] <= alpha_bound_closed_form(L, T, alpha) + 1e-9);
      // Ceil reaches the real bound unless capped.
      REQUIRE(ceil[T] >= std::min(alpha_bound_real(L, ceil[T - 1], alpha) - 1e-9,
                                  static_cast<double>(cap)));
      // Round is within half a layer of the real bound unless capped.
      const double real = alpha_bound_real(L, round[T - 1], alpha);
      if (round[T] < cap) REQUIRE(std::abs(round[T] - real) <= 0.5 + 1e-9);
      // Ceil >= Round >= Floor, step by step from the same start and along the paths.
      // (alpha_bound is monotone in frozen_before, so the orders carry over to the paths.)
      REQUIRE(ceil[T] >= round[T]);
      REQUIRE(round[T] >= floor[T]);
      for (const int f : {floor[T - 1], round[T - 1], ceil[T - 1]}) {
        const int lo = alpha_bound(L, f, alpha, FreezeRounding::Floor, min_active);
        const int mid = alpha_bound(L, f, alpha, FreezeRounding::Round, min_active);
        const int hi = alpha_bound(L, f, alpha, FreezeRounding::Ceil, min_active);
        REQUIRE(lo <= mid);
        REQUIRE(mid <= hi);
        REQUIRE(hi - lo <= 1);
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Gradient-norm policy: min(alpha bound, argmin over active layers + 1)

TEST_CASE("gradient-norm policy: hand cases", "[freeze]") {
  const auto p = make_gradient_norm_policy(12, planner(1.0 / 3, FreezeRounding::Floor, 1));
  CHECK(p->name() == "gradient_norm");
  CHECK(p->needs_grad_norms());
  std::vector<double> g(12, 1.0);

  // Converged layer deep: the bound (4) wins.
  g[7] = 0.1;
  CHECK(p->next(1, 0, g) == 4);
  // Converged layer shallow: layers 0..1 freeze.
  g[1] = 0.05;
  CHECK(p->next(1, 0, g) == 2);
  // Ties: the lowest index wins (freezing less).
  g.assign(12, 1.0);
  g[3] = 0.2;
  g[1] = 0.2;
  CHECK(p->next(1, 0, g) == 2);
  // Only active layers count: the frozen layers' tiny norms are ignored.
  g.assign(12, 1.0);
  g[0] = 0.0;
  g[5] = 0.0;
  g[6] = 0.5;  // bound from 6 is 8; argmin over {6..11} is 6
  CHECK(p->next(2, 6, g) == 7);
  g[6] = 1.0;
  g[11] = 0.5;  // converged 12, bound 8
  CHECK(p->next(2, 6, g) == 8);
  // At the cap nothing more freezes, whatever the norms say.
  g.assign(12, 1.0);
  g[11] = 0.0;
  CHECK(p->next(5, 11, g) == 11);
  // Stuck bound (floor of 10 + 2/3): stays, never goes below frozen_before.
  CHECK(p->next(6, 10, g) == 10);

  // Wrong number of norms.
  CHECK_THROWS_AS(p->next(1, 0, std::vector<double>(11, 1.0)), Error);
  CHECK_THROWS_AS(p->next(1, 0, std::vector<double>(13, 1.0)), Error);
  CHECK_THROWS_AS(p->next(1, 0, {}), Error);
}

TEST_CASE("gradient-norm policy: random property", "[freeze]") {
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 3000; ++trial) {
    const int L = 1 + static_cast<int>(rng() % 24);
    const double alpha = random_alpha(rng);
    const FreezeRounding r = kRoundings[rng() % 3];
    const int min_active = 1 + static_cast<int>(rng() % L);
    const int frozen_before = static_cast<int>(rng() % (L - min_active + 1));
    // Few distinct values so that ties are common.
    std::vector<double> g(L);
    for (double& x : g) x = static_cast<double>(rng() % 5) / 4.0;
    const auto policy = make_gradient_norm_policy(L, planner(alpha, r, min_active));
    const int got = policy->next(1 + static_cast<int>(rng() % 10), frozen_before, g);
    const int bound = alpha_bound(L, frozen_before, alpha, r, min_active);
    INFO("L=" << L << " alpha=" << alpha << " min_active=" << min_active
              << " frozen_before=" << frozen_before);
    REQUIRE(got == std::min(bound, converged_count(g, frozen_before)));
    REQUIRE(got >= frozen_before);
    REQUIRE(got <= L - min_active);
  }
}

// ---------------------------------------------------------------------------
// freeze_timeline from a config

TEST_CASE("freeze timeline: none, alpha, gradient_norm without trace, replay list", "[freeze]") {
  SECTION("none: nothing ever freezes") {
    const auto t = freeze_timeline(tiny({"planner.freeze_policy=none"}), 6);
    CHECK(t.frozen == std::vector<int>(7, 0));
    CHECK_FALSE(t.used_alpha_bound);
  }
  SECTION("alpha: the alpha_bound iteration") {
    // L = 4, alpha = 1/3, floor_progress (the default): 1.33->1, 1+1=2,
    // 2+2/3->2 but at least one more: 3 = L - min_active.
    const auto t = freeze_timeline(tiny(), 5);
    CHECK(t.frozen == std::vector<int>{0, 1, 2, 3, 3, 3});
    CHECK_FALSE(t.used_alpha_bound);
    const auto t12 = freeze_timeline(tiny({"model.num_hidden_layers=12"}), 7);
    CHECK(t12.frozen == std::vector<int>{0, 4, 6, 8, 9, 10, 11, 11});
    // Plain floor stalls once alpha (L - f) < 1: 10 of 12 forever.
    const auto floor12 = freeze_timeline(tiny({"model.num_hidden_layers=12", "planner.freeze_rounding=floor"}), 7);
    CHECK(floor12.frozen == std::vector<int>{0, 4, 6, 8, 9, 10, 10, 10});

    std::mt19937 rng(99);
    const char* rounding[] = {"floor", "round", "ceil"};
    for (int trial = 0; trial < 40; ++trial) {
      const int L = 2 + static_cast<int>(rng() % 23);
      const double alpha = random_alpha(rng);
      const int ri = static_cast<int>(rng() % 3);
      const int min_active = 1 + static_cast<int>(rng() % L);
      std::ostringstream a;
      a << std::setprecision(17) << alpha;
      const Config c = tiny({"model.num_hidden_layers=" + std::to_string(L), "planner.alpha=" + a.str(),
                             std::string("planner.freeze_rounding=") + rounding[ri],
                             "planner.min_active_layers=" + std::to_string(min_active)});
      INFO("L=" << L << " alpha=" << alpha << " rounding=" << rounding[ri] << " min_active=" << min_active);
      const auto t = freeze_timeline(c, 12);
      CHECK(t.frozen == alpha_path(L, alpha, kRoundings[ri], min_active, 12));
      CHECK_FALSE(t.used_alpha_bound);
    }
  }
  SECTION("gradient_norm without a trace plans with the alpha bound and says so") {
    const auto t = freeze_timeline(tiny({"planner.freeze_policy=gradient_norm", "planner.alpha=0.5"}), 4);
    // L = 4, alpha = 1/2: 2, 3 (= cap L - 1).
    CHECK(t.frozen == std::vector<int>{0, 2, 3, 3, 3});
    CHECK(t.used_alpha_bound);
    const auto none = freeze_timeline(tiny({"planner.freeze_policy=gradient_norm"}), 0);
    CHECK(none.frozen == std::vector<int>{0});
  }
  SECTION("replay of a schedule: the list, then its last value holds") {
    const auto t = freeze_timeline(
        tiny({"planner.freeze_policy=replay", "planner.replay_frozen=[1, 1, 2, 3]"}), 7);
    CHECK(t.frozen == std::vector<int>{0, 1, 1, 2, 3, 3, 3, 3});
    CHECK_FALSE(t.used_alpha_bound);
    const auto s = freeze_timeline(
        tiny({"planner.freeze_policy=replay", "planner.replay_frozen=[0, 2]"}), 4);
    CHECK(s.frozen == std::vector<int>{0, 0, 2, 2, 2});
  }
}

// ---------------------------------------------------------------------------
// Gradient-norm traces

TEST_CASE("grad-norm trace: a valid CSV round-trips into steps[T-1][layer]", "[freeze]") {
  TempDir dir("freeze_roundtrip");
  // Rows in any order, CRLF line ends and blank lines accepted.
  const std::string hand = dir.write("hand.csv",
                                     "step,layer,grad_norm\r\n"
                                     "2,1,0.25\r\n"
                                     "1,0,1.5\n"
                                     "\n"
                                     "1,2,0\n"
                                     "2,0,3e-2\n"
                                     "1,1,7\n"
                                     "2,2,12.5\n");
  const GradNormTrace t = load_grad_norm_trace(hand, 3);
  REQUIRE(t.steps.size() == 2);
  CHECK(t.steps[0] == std::vector<double>{1.5, 7, 0});
  CHECK(t.steps[1] == std::vector<double>{0.03, 0.25, 12.5});

  std::mt19937 rng(4242);
  for (int trial = 0; trial < 30; ++trial) {
    const int L = 1 + static_cast<int>(rng() % 8);
    const int steps = 1 + static_cast<int>(rng() % 5);
    std::vector<std::vector<double>> norms(steps, std::vector<double>(L));
    std::vector<std::pair<int, int>> rows;
    for (int s = 0; s < steps; ++s)
      for (int l = 0; l < L; ++l) {
        norms[s][l] = static_cast<double>(rng() % 100000) / 997.0;
        rows.emplace_back(s, l);
      }
    std::shuffle(rows.begin(), rows.end(), rng);
    std::ostringstream csv;
    csv << "step,layer,grad_norm\n" << std::setprecision(17);
    for (auto [s, l] : rows) csv << s + 1 << "," << l << "," << norms[s][l] << "\n";
    const auto path = dir.write("random" + std::to_string(trial) + ".csv", csv.str());
    INFO("L=" << L << " steps=" << steps);
    CHECK(load_grad_norm_trace(path, L).steps == norms);
  }
}

TEST_CASE("grad-norm trace: malformed files name file:line", "[freeze]") {
  TempDir dir("freeze_malformed");
  struct Case {
    const char* name;
    std::string text;
    int line;  // the offending line
  };
  const std::string ok12 = "1,0,0.5\n1,1,0.5\n1,2,0.5\n";  // lines 2..4 when after the header
  const std::vector<Case> cases = {
      {"bad_header", "step,layer,norm\n1,0,0.5\n1,1,0.5\n1,2,0.5\n", 1},
      {"empty", "", 1},
      {"non_numeric_norm", "step,layer,grad_norm\n1,0,0.5\n1,1,abc\n1,2,0.5\n", 3},
      {"non_numeric_layer", "step,layer,grad_norm\n1,x,0.5\n", 2},
      {"trailing_garbage", "step,layer,grad_norm\n1,0,0.5\n1,1,0.5x\n", 3},
      {"fractional_step", "step,layer,grad_norm\n1.5,0,0.5\n", 2},
      {"two_fields", "step,layer,grad_norm\n1,0,0.5\n1,1\n", 3},
      {"four_fields", "step,layer,grad_norm\n1,0,0.5,9\n", 2},
      {"layer_out_of_range", "step,layer,grad_norm\n" + ok12 + "1,3,0.5\n", 5},
      {"negative_layer", "step,layer,grad_norm\n1,-1,0.5\n", 2},
      {"step_zero", "step,layer,grad_norm\n0,0,0.5\n", 2},
      {"duplicate", "step,layer,grad_norm\n1,0,0.5\n1,1,0.5\n1,2,0.5\n2,0,1\n1,1,0.7\n", 6},
      {"negative_norm", "step,layer,grad_norm\n1,0,-0.1\n", 2},
      {"nan_norm", "step,layer,grad_norm\n1,0,0.5\n1,1,nan\n", 3},
      {"inf_norm", "step,layer,grad_norm\n1,0,inf\n", 2},
      // Refused before a million steps of rows are allocated.
      {"step_beyond_the_file", "step,layer,grad_norm\n1000000,0,0.5\n", 2},
  };
  for (const Case& c : cases) {
    const std::string path = dir.write(std::string(c.name) + ".csv", c.text);
    const std::string msg = trace_error(path, 3);
    INFO(c.name << ": " << msg);
    CHECK(msg.find(path + ":" + std::to_string(c.line) + ":") != std::string::npos);
  }

  // A missing layer has no offending line: the message names the file, the
  // step and the layer.
  const std::string missing = dir.write("missing.csv", "step,layer,grad_norm\n1,0,1\n1,2,1\n");
  const std::string msg = trace_error(missing, 3);
  INFO(msg);
  CHECK(msg.find(missing) == 0);
  CHECK(msg.find("step 1") != std::string::npos);
  CHECK(msg.find("layer 1") != std::string::npos);
  // A step left out entirely is missing too.
  const std::string gap = dir.write("gap.csv", "step,layer,grad_norm\n1,0,1\n3,0,1\n");
  const std::string gap_msg = trace_error(gap, 1);
  INFO(gap_msg);
  CHECK(gap_msg.find(gap) == 0);
  CHECK(gap_msg.find("step 2") != std::string::npos);
  // Garbage is shown escaped, on one line.
  const std::string garbage = dir.write("garbage.csv", "step,layer,grad_norm\n\x01\xff\r\x1b[2J,0,1\n");
  const std::string garbage_msg = trace_error(garbage, 3);
  CHECK(garbage_msg.find("found '\\x01\\xff\\x0d\\x1b[2J,0,1'") != std::string::npos);
  // And a file that is not there.
  CHECK_THROWS_AS(load_grad_norm_trace(dir.write("x", "") + ".absent", 3), Error);
}

TEST_CASE("a run computes gradient norms only where its freeze policy reads them as it trains", "[freeze]") {
  CHECK(reads_grad_norms(tiny({"planner.freeze_policy=\"gradient_norm\""})));
  CHECK_FALSE(reads_grad_norms(tiny({"planner.freeze_policy=\"alpha\""})));
  CHECK_FALSE(reads_grad_norms(tiny({"planner.freeze_policy=\"none\""})));
  CHECK_FALSE(reads_grad_norms(tiny({"planner.freeze_policy=\"replay\"", "planner.replay_frozen=[1, 2]"})));
  // A replayed trace is read from its file, not measured.
  TempDir dir("freeze_reads");
  const std::string trace = dir.write("t.csv", "step,layer,grad_norm\n1,0,1\n1,1,1\n1,2,1\n");
  CHECK_FALSE(reads_grad_norms(
      tiny({"planner.freeze_policy=\"replay\"", "planner.replay_grad_norms_file=\"" + trace + "\""})));
  // A run that read none wrote a header without rows: refused with the way to record them.
  const std::string none = dir.write("none.csv", "step,layer,grad_norm\n");
  const std::string msg = trace_error(none, 3);
  CHECK(msg.find(none + ":1: no step recorded") == 0);
  CHECK(msg.find("planner.freeze_policy = \"gradient_norm\"") != std::string::npos);
}

TEST_CASE("replay of a gradient-norm trace runs the gradient-norm policy on it", "[freeze]") {
  TempDir dir("freeze_replay");
  // L = 4, alpha = 1/2, floor, min_active 1 (cap 3).
  // T=1: bound 0 + 2 = 2; argmin {0.2, 0.9, 0.5, 0.7} = layer 0 -> 1 frozen.
  // T=2: bound 1 + 1.5 = 2.5 -> 2; argmin over layers 1..3 of {-, 0.6, 0.4, 0.1} = 3 -> 4; min = 2.
  // T>2: the recording ended, the count holds (the alpha policy would go to 3).
  const std::string path = dir.write("norms.csv",
                                     "step,layer,grad_norm\n"
                                     "1,0,0.2\n1,1,0.9\n1,2,0.5\n1,3,0.7\n"
                                     "2,0,0.0\n2,1,0.6\n2,2,0.4\n2,3,0.1\n");
  const Config c = tiny({"planner.freeze_policy=replay", "planner.alpha=0.5",
                         "planner.replay_grad_norms_file=\"" + path + "\""});
  REQUIRE(c.planner.replay_grad_norms_file == path);
  const auto t = freeze_timeline(c, 4);
  CHECK(t.frozen == std::vector<int>{0, 1, 2, 2, 2});
  CHECK_FALSE(t.used_alpha_bound);
  CHECK(freeze_timeline(tiny({"planner.alpha=0.5"}), 4).frozen == std::vector<int>{0, 2, 3, 3, 3});

  // Random traces: the timeline is the gradient-norm policy fed row by row.
  std::mt19937 rng(31337);
  for (int trial = 0; trial < 20; ++trial) {
    const int steps = 1 + static_cast<int>(rng() % 6);
    std::ostringstream csv;
    csv << "step,layer,grad_norm\n";
    std::vector<std::vector<double>> norms(steps, std::vector<double>(4));
    for (int s = 0; s < steps; ++s)
      for (int l = 0; l < 4; ++l) {
        norms[s][l] = static_cast<double>(rng() % 4);
        csv << s + 1 << "," << l << "," << norms[s][l] << "\n";
      }
    const auto p = dir.write("r" + std::to_string(trial) + ".csv", csv.str());
    const Config rc = tiny({"planner.freeze_policy=replay", "planner.replay_grad_norms_file=\"" + p + "\""});
    std::vector<int> expected{0};
    for (int T = 1; T <= steps + 2; ++T) {
      const int f = expected.back();
      expected.push_back(T <= steps ? std::min(alpha_bound(4, f, rc.planner.alpha, rc.planner.freeze_rounding, 1),
                                               converged_count(norms[T - 1], f))
                                    : f);
    }
    const auto got = freeze_timeline(rc, steps + 2);
    CHECK(got.frozen == expected);
    CHECK_FALSE(got.used_alpha_bound);
  }
}

// ---------------------------------------------------------------------------
// The recipe of docs/DESIGN.md ("How to add: a freeze policy"), followed
// once: a policy written and registered here alone, named by a config, and
// carried through the planner's walk of a training.

namespace {

// Freezes one more layer at every second freeze step, up to the cap.
class EveryOtherStep final : public FreezePolicy {
 public:
  EveryOtherStep(int L, int min_active) : most_(L - min_active) {}
  std::string name() const override { return "every_other_step"; }
  int next(int T, int frozen_before, std::span<const double>) const override {
    return T % 2 == 0 ? std::min(frozen_before + 1, std::max(frozen_before, most_)) : frozen_before;
  }

 private:
  int most_;
};

// Answers beyond what may freeze: the planner refuses it.
class Greedy final : public FreezePolicy {
 public:
  std::string name() const override { return "freeze_everything"; }
  int next(int, int, std::span<const double>) const override { return 1000; }
};

void register_toys() {
  static const bool once = [] {
    register_freeze_policy("every_other_step", [](const Config& c) {
      return std::make_unique<EveryOtherStep>(c.model.num_hidden_layers, c.planner.min_active_layers);
    });
    register_freeze_policy("freeze_everything", [](const Config&) { return std::make_unique<Greedy>(); });
    return true;
  }();
  (void)once;
}

}  // namespace

TEST_CASE("a freeze policy registered outside the planner is named by a config and walked", "[freeze]") {
  register_toys();
  const Config c = tiny({"planner.freeze_policy=\"every_other_step\"", "training.epochs=7"});
  CHECK(freeze_timeline(c, 7).frozen == std::vector<int>{0, 0, 1, 1, 2, 2, 3, 3});

  // The planner's walk takes each step's frozen count from it; the plans
  // act on it where it pays (decision 0036), never beyond it.
  const AnalyticCostModel cost(c.cluster, c.training);
  RunPlanner planner(c, cost);
  const RunRecord record = walk_ahead(planner);
  const std::vector<int> allowed{0, 0, 1, 1, 2, 2, 3, 3};
  REQUIRE(record.steps.size() >= 6);
  for (const StepRecord& step : record.steps) {
    CAPTURE(step.step);
    CHECK(step.inputs.frozen_layers == allowed.at(step.step));
    CHECK(planner.run().plans.at(step.plan).partition.frozen_layers <= allowed.at(step.step));
  }

  // Registered names are checked like built-in ones, and a policy's answer
  // outside [frozen before, L - min_active_layers] is an error naming it.
  CHECK_THROWS_WITH(register_freeze_policy("every_other_step", {}), Catch::Contains("no factory"));
  CHECK_THROWS_WITH(register_freeze_policy("alpha", [](const Config&) { return std::make_unique<Greedy>(); }),
                    Catch::Contains("\"alpha\" is already registered"));
  CHECK_THROWS_WITH(register_freeze_policy("Bad-Name", [](const Config&) { return std::make_unique<Greedy>(); }),
                    Catch::Contains("lower_snake_case"));
  CHECK_THROWS_WITH(tiny({"planner.freeze_policy=\"every_second_step\""}),
                    Catch::Contains("planner.freeze_policy") && Catch::Contains("every_other_step") &&
                        Catch::Contains("\"every_second_step\""));
  CHECK_THROWS_WITH(freeze_timeline(tiny({"planner.freeze_policy=\"freeze_everything\""}), 2),
                    Catch::Contains("freeze policy \"freeze_everything\" at step 1: 1000 frozen layers, expected 0 to 3"));
}
