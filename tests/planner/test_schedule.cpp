#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <random>
#include <string>
#include <unordered_set>

#include "planner/error.hpp"
#include "planner/schedule.hpp"
#include "planner/timeline.hpp"
#include "tests/planner/support.hpp"

using namespace ep;

namespace {

constexpr ScheduleKind kAllKinds[] = {ScheduleKind::GPipe, ScheduleKind::OneFOneB,
                                      ScheduleKind::LoopingBreadthFirst,
                                      ScheduleKind::LoopingDepthFirst};

bool looping(ScheduleKind k) {
  return k == ScheduleKind::LoopingBreadthFirst || k == ScheduleKind::LoopingDepthFirst;
}


// Every builder, K ∈ {1,2,4,8}, M ∈ [K, 6K], v ∈ {1,2} (2 only for the
// looping kinds), bare and with buckets, optimizer and each frozen input.
void for_each_schedule(const std::function<void(const ScheduleOptions&, const Schedule&)>& fn) {
  for (ScheduleKind kind : kAllKinds) {
    for (int v : {1, 2}) {
      if (v > 1 && !looping(kind)) continue;
      for (int K : {1, 2, 4, 8}) {
        for (int M = K; M <= 6 * K; ++M) {
          for (int variant = 0; variant < 5; ++variant) {
            ScheduleOptions o = test::schedule(kind, K, M, v);
            if (variant > 0) {
              for (int s = 0; s < K * v; ++s) o.buckets_per_stage.push_back(1 + s % 3);
              o.optimizer_step = true;
              o.frozen_input = variant == 1   ? FrozenInput::Forward
                               : variant == 2 ? FrozenInput::CacheRead
                               : variant == 3 ? FrozenInput::ForwardAndCacheWrite
                                              : FrozenInput::Advance;
            }
            fn(o, build_schedule(o));
          }
        }
      }
    }
  }
}

std::string describe(const ScheduleOptions& o) {
  return to_string(o.kind) + " K=" + std::to_string(o.K) + " M=" + std::to_string(o.M) +
         " v=" + std::to_string(o.v) + " buckets=" + std::to_string(o.buckets_per_stage.size()) +
         " frozen=" + std::to_string(static_cast<int>(o.frozen_input));
}

std::string check_error(const Schedule& s) {
  try {
    check_schedule(s);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::size_t index_of(const std::vector<Action>& list, const Action& a) {
  return static_cast<std::size_t>(std::find(list.begin(), list.end(), a) - list.begin());
}

double makespan(const ScheduleOptions& o, double t_f, double t_b) {
  return simulate(build_schedule(o), unit_cost(t_f, t_b, o.v)).makespan;
}

}  // namespace

TEST_CASE("action text follows torch's notation", "[schedule]") {
  CHECK(to_string(Action{ActionKind::Forward, 2, 0}) == "2F0");
  CHECK(to_string(Action{ActionKind::Backward, 3, 5}) == "3B5");
  CHECK(to_string(Action{ActionKind::SendAct, 1, 3, -1, 2}) == "1SEND_F3>2");
  CHECK(to_string(Action{ActionKind::RecvAct, 2, 3, -1, 1}) == "2RECV_F3<1");
  CHECK(to_string(Action{ActionKind::SendGrad, 2, 3, -1, 1}) == "2SEND_B3>1");
  CHECK(to_string(Action{ActionKind::RecvGrad, 1, 3, -1, 2}) == "1RECV_B3<2");
  CHECK(to_string(Action{ActionKind::AllReduce, 2, -1, 1}) == "2AR1");
  CHECK(to_string(Action{ActionKind::OptimizerStep, 2}) == "2OPT");
  CHECK(to_string(Action{ActionKind::FrozenForward, 0, 3}) == "0FZ3");
  CHECK(to_string(Action{ActionKind::CacheRead, 0, 3}) == "0CR3");
  CHECK(to_string(Action{ActionKind::CacheWrite, 0, 3}) == "0CW3");
  // torch's unlowered text, without the peer.
  CHECK(parse_action("1SEND_F3") == Action{ActionKind::SendAct, 1, 3});
  CHECK(parse_action("12B34") == Action{ActionKind::Backward, 12, 34});
}

TEST_CASE("parse_action rejects garbage, quoting it", "[schedule]") {
  for (const char* bad : {"", "F0", "2", "2X0", "2F", "2F0x", "2F-1", "-2F0", "02F0", "2F01",
                          "2OPT1", "2AR", "2SEND_F3<1", "2RECV_F3>1", "2F0>1", "1SEND_F3>",
                          "1SEND_F3>x", "2 F0", "1234567890F0", "2f0"}) {
    INFO(bad);
    REQUIRE_THROWS_AS(parse_action(bad), Error);
    REQUIRE_THROWS_WITH(parse_action(bad), Catch::Contains("'" + std::string(bad) + "'"));
  }
}

TEST_CASE("every generated action and schedule round-trips through text", "[schedule]") {
  int schedules = 0;
  for_each_schedule([&](const ScheduleOptions& o, const Schedule& s) {
    INFO(describe(o));
    std::unordered_set<Action> seen;
    std::size_t total = 0;
    std::string bad;
    for (const auto& list : s.devices) {
      for (const Action& a : list) {
        if (parse_action(to_string(a)) != a) bad += to_string(a) + " ";
        seen.insert(a);
        ++total;
      }
    }
    REQUIRE(bad.empty());
    REQUIRE(seen.size() == total);  // hash and == agree; no duplicates
    REQUIRE(parse_schedule_csv(to_csv(s)) == s);
    ++schedules;
  });
  CHECK(schedules == 5 * (6 + 11 + 21 + 41) * 6);  // 5 option variants
}

TEST_CASE("the CSV has a header and one row per device", "[schedule]") {
  const Schedule s = build_schedule(test::schedule(ScheduleKind::GPipe, 2, 2));
  CHECK(to_csv(s) ==
        "# schedule=gpipe K=2 M=2 v=1\n"
        "0,0F0,0SEND_F0>1,0F1,0SEND_F1>1,0RECV_B1<1,0B1,0RECV_B0<1,0B0\n"
        "1,1RECV_F0<0,1F0,1RECV_F1<0,1F1,1B1,1SEND_B1>0,1B0,1SEND_B0>0\n");
  CHECK(parse_schedule_csv("# schedule=looping_bf K=1 M=1 v=2\r\n0,0F0,1F0,1B0,0B0") ==
        Schedule{ScheduleKind::LoopingBreadthFirst, 1, 1, 2, {{parse_action("0F0"),
                 parse_action("1F0"), parse_action("1B0"), parse_action("0B0")}}});
  for (const char* bad : {"", "0,0F0\n", "# schedule=gpipe K=2 M=1 v=1\n0,0F0\n",
                          "# schedule=nope K=1 M=1 v=1\n0,0F0\n",
                          "# schedule=gpipe K=1 M=1\n0,0F0\n",
                          "# schedule=gpipe K=x M=1 v=1\n0,0F0\n",
                          "# schedule=gpipe K=1 M=1 v=1\n1,0F0\n",
                          "# schedule=gpipe K=1 M=1 v=1\n0,0F0,,0B0\n"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_schedule_csv(bad), Error);
  }
  CHECK_THROWS_WITH(parse_schedule_csv("# schedule=gpipe K=1 M=1 v=1\n0,0F0,0Q0\n"),
                    Catch::Contains("line 2") && Catch::Contains("'0Q0'"));
}

TEST_CASE("the checker accepts every builder", "[schedule]") {
  for_each_schedule([](const ScheduleOptions& o, const Schedule& s) {
    INFO(describe(o));
    REQUIRE(check_error(s).empty());
  });
}

TEST_CASE("depth-first looping runs for every M and v, bubble GPipe's / v when M >= K",
          "[schedule]") {
  for (int K = 1; K <= 8; ++K) {
    for (int v = 1; v <= 4; ++v) {
      for (int M = 1; M <= 6 * K; ++M) {
        const ScheduleOptions o = test::schedule(ScheduleKind::LoopingDepthFirst, K, M, v);
        INFO(describe(o));
        REQUIRE(check_error(build_schedule(o)).empty());
        // Multiples of 12: t/v is exact for every v here.
        for (auto [t_f, t_b] : {std::pair{12.0, 24.0}, {24.0, 12.0}, {12.0, 12.0}}) {
          const double gpipe_bubble = (K - 1) * (t_f + t_b);
          const double bubble = makespan(o, t_f, t_b) - M * (t_f + t_b);
          if (M >= K) {
            REQUIRE(bubble * v == gpipe_bubble);
          } else {
            REQUIRE(bubble <= gpipe_bubble);
          }
        }
      }
    }
  }
}

TEST_CASE("builders: orders, placement of all-reduce, optimizer and frozen input", "[schedule]") {
  const auto text = [](const std::vector<Action>& list) {
    std::string out;
    for (const Action& a : list) out += (out.empty() ? "" : " ") + to_string(a);
    return out;
  };
  SECTION("compute-only orders") {
    const Schedule gpipe = build_compute_schedule(test::schedule(ScheduleKind::GPipe, 2, 3));
    CHECK(text(gpipe.devices[1]) == "1F0 1F1 1F2 1B2 1B1 1B0");
    const Schedule f1b1 = build_compute_schedule(test::schedule(ScheduleKind::OneFOneB, 3, 4));
    CHECK(text(f1b1.devices[0]) == "0F0 0F1 0F2 0B0 0F3 0B1 0B2 0B3");
    CHECK(text(f1b1.devices[2]) == "2F0 2B0 2F1 2B1 2F2 2B2 2F3 2B3");
    const Schedule bfs = build_compute_schedule(test::schedule(ScheduleKind::LoopingBreadthFirst, 2, 2, 2));
    CHECK(text(bfs.devices[0]) == "0F0 0F1 2F0 2F1 2B1 2B0 0B1 0B0");
    // Rounds of 3 and 2 micro-batches; warm-up (v-1)·3 + 2·(K-1-d).
    const Schedule dfs = build_compute_schedule(test::schedule(ScheduleKind::LoopingDepthFirst, 2, 5, 2));
    CHECK(text(dfs.devices[0]) == "0F0 0F1 0F2 2F0 2F1 2F2 2B0 0F3 2B1 0F4 2B2 2F3 0B0 2F4 0B1 "
                                  "0B2 2B3 2B4 0B3 0B4");
    CHECK(text(dfs.devices[1]) == "1F0 1F1 1F2 3F0 3B0 3F1 3B1 3F2 3B2 1F3 1B0 1F4 1B1 3F3 1B2 "
                                  "3F4 3B3 3B4 1B3 1B4");
  }
  SECTION("all-reduce after the stage's last backward, optimizer steps at the end") {
    ScheduleOptions o = test::schedule(ScheduleKind::LoopingBreadthFirst, 2, 2, 2);
    o.buckets_per_stage = {1, 2, 2, 1};
    o.optimizer_step = true;
    const Schedule s = build_compute_schedule(o);
    CHECK(text(s.devices[1]) == "1F0 1F1 3F0 3F1 3B1 3B0 3AR0 1B1 1B0 1AR0 1AR1 1OPT 3OPT");
  }
  SECTION("frozen input precedes stage 0's forward") {
    ScheduleOptions o = test::schedule(ScheduleKind::OneFOneB, 2, 2);
    o.frozen_input = FrozenInput::ForwardAndCacheWrite;
    CHECK(text(build_compute_schedule(o).devices[0]) == "0FZ0 0CW0 0F0 0FZ1 0CW1 0F1 0B0 0B1");
    o.frozen_input = FrozenInput::CacheRead;
    CHECK(text(build_compute_schedule(o).devices[0]) == "0CR0 0F0 0CR1 0F1 0B0 0B1");
    o.frozen_input = FrozenInput::Advance;  // stale entry read, advanced, replaced
    CHECK(text(build_compute_schedule(o).devices[0]) == "0CR0 0FZ0 0CW0 0F0 0CR1 0FZ1 0CW1 0F1 0B0 0B1");
  }
  SECTION("lowering adds transfers only between devices, wrapping K-1 -> 0") {
    const Schedule one = build_schedule(test::schedule(ScheduleKind::LoopingDepthFirst, 1, 3, 2));
    CHECK(one == build_compute_schedule(test::schedule(ScheduleKind::LoopingDepthFirst, 1, 3, 2)));
    const Schedule s = build_schedule(test::schedule(ScheduleKind::LoopingBreadthFirst, 2, 1, 2));
    CHECK(text(s.devices[0]) ==
          "0F0 0SEND_F0>1 2RECV_F0<1 2F0 2SEND_F0>1 2RECV_B0<1 2B0 2SEND_B0>1 0RECV_B0<1 0B0");
    CHECK(text(s.devices[1]) ==
          "1RECV_F0<0 1F0 1SEND_F0>0 3RECV_F0<0 3F0 3B0 3SEND_B0>0 1RECV_B0<0 1B0 1SEND_B0>0");
    CHECK_THROWS_AS(lower(s), Error);
  }
}

TEST_CASE("invalid options are rejected", "[schedule]") {
  CHECK_THROWS_WITH(build_schedule(test::schedule(ScheduleKind::GPipe, 0, 1)), Catch::Contains("K"));
  CHECK_THROWS_WITH(build_schedule(test::schedule(ScheduleKind::GPipe, 2, 0)), Catch::Contains("M"));
  CHECK_THROWS_AS(build_schedule(test::schedule(ScheduleKind::LoopingBreadthFirst, 2, 2, 0)), Error);
  CHECK_THROWS_WITH(build_schedule(test::schedule(ScheduleKind::OneFOneB, 2, 2, 2)),
                    Catch::Contains("v = 2"));
  CHECK_THROWS_AS(build_schedule(test::schedule(ScheduleKind::GPipe, 2, 2, 2)), Error);
  ScheduleOptions o = test::schedule(ScheduleKind::LoopingDepthFirst, 2, 4, 2);
  o.buckets_per_stage = {1, 1};
  CHECK_THROWS_WITH(build_schedule(o), Catch::Contains("K*v = 4"));
  o.buckets_per_stage = {1, 1, -1, 1};
  CHECK_THROWS_WITH(build_schedule(o), Catch::Contains("negative"));
}

TEST_CASE("the checker rejects corrupted schedules with the marked grid", "[schedule]") {
  ScheduleOptions o = test::schedule(ScheduleKind::OneFOneB, 3, 4);
  o.buckets_per_stage = {1, 1, 1};
  o.optimizer_step = true;
  const Schedule good = build_schedule(o);
  REQUIRE(check_error(good).empty());
  Schedule s = good;
  auto& dev1 = s.devices[1];
  const auto at = [&](int d, const char* text) {
    return s.devices[d].begin() +
           static_cast<std::ptrdiff_t>(index_of(s.devices[d], parse_action(text)));
  };
  std::string expected_mark;

  SECTION("a removed receive") {
    dev1.erase(at(1, "1RECV_F2<0"));
    expected_mark = "[[0SEND_F2>1]]";
  }
  SECTION("a backward moved before its forward") {
    const Action b = *at(1, "1B1");
    dev1.erase(at(1, "1B1"));
    dev1.insert(at(1, "1F1"), b);
    expected_mark = "[[1B1]]";
  }
  SECTION("a duplicated forward") {
    dev1.insert(at(1, "1B3"), parse_action("1F2"));
    expected_mark = "[[1F2]]";
  }
  SECTION("a send to the wrong device") {
    *at(1, "1SEND_B2>0") = parse_action("1SEND_B2>2");
    expected_mark = "[[1SEND_B2>2]]";
  }
  SECTION("an action on another stage's device") {
    *at(1, "1F0") = parse_action("0F0");
    expected_mark = "[[0F0]]";
  }
  SECTION("an all-reduce before the stage's last backward") {
    const Action ar = *at(2, "2AR0");
    s.devices[2].erase(at(2, "2AR0"));
    s.devices[2].insert(at(2, "2B3"), ar);
    expected_mark = "[[2AR0]]";
  }
  SECTION("an optimizer step missing on one stage") {
    s.devices[0].pop_back();
    expected_mark = "[[1OPT]]";
  }
  SECTION("a deadlock the static check cannot see") {
    // Device 0 waits for the last gradient before sending any activation.
    const Action recv = *at(0, "0RECV_B3<1");
    s.devices[0].erase(at(0, "0RECV_B3<1"));
    s.devices[0].insert(s.devices[0].begin(), recv);
    expected_mark = "[[0RECV_B3<1]]";
  }
  const std::string error = check_error(s);
  INFO(error);
  CHECK(error.starts_with("invalid schedule: "));
  CHECK(error.find(expected_mark) != std::string::npos);
  CHECK(error.find("\ndev 0 | ") != std::string::npos);
  CHECK(error.find("\ndev 2 | ") != std::string::npos);
}

TEST_CASE("a frozen input used for some micro-batches only is rejected", "[schedule]") {
  ScheduleOptions o = test::schedule(ScheduleKind::GPipe, 2, 3);
  o.frozen_input = FrozenInput::Forward;
  Schedule s = build_schedule(o);
  s.devices[0].erase(s.devices[0].begin() + static_cast<std::ptrdiff_t>(
                                                index_of(s.devices[0], parse_action("0FZ1"))));
  CHECK_THROWS_WITH(check_schedule(s), Catch::Contains("[[0FZ0]]"));
}

TEST_CASE("an advance must read, forward, then write", "[schedule]") {
  ScheduleOptions o = test::schedule(ScheduleKind::GPipe, 2, 2);
  o.frozen_input = FrozenInput::Advance;
  const Schedule good = build_schedule(o);
  REQUIRE_NOTHROW(check_schedule(good));
  Schedule no_write = good;  // read and forward but no write: the advanced entry would be lost
  for (int m : {0, 1})
    no_write.devices[0].erase(no_write.devices[0].begin() + static_cast<std::ptrdiff_t>(index_of(
                                  no_write.devices[0], parse_action("0CW" + std::to_string(m)))));
  CHECK_THROWS_WITH(check_schedule(no_write), Catch::Contains("CR, FZ, CW"));
  Schedule swapped = good;  // forward before the read it advances
  auto& d0 = swapped.devices[0];
  std::swap(d0[index_of(d0, parse_action("0CR0"))], d0[index_of(d0, parse_action("0FZ0"))]);
  CHECK_THROWS_WITH(check_schedule(swapped), Catch::Contains("[["));
}

TEST_CASE("GPipe and 1F1B: makespan (M+K-1)(t_f+t_b), bubble (K-1)/(M+K-1)", "[schedule]") {
  for (int K : {1, 2, 3, 4, 8}) {
    for (int M = 1; M <= 6 * K; ++M) {
      for (auto [t_f, t_b] : {std::pair{1.0, 2.0}, {0.5, 1.5}, {3.0, 1.0}, {1.0, 1.0}}) {
        INFO("K=" << K << " M=" << M << " t_f=" << t_f << " t_b=" << t_b);
        const double expected = (M + K - 1) * (t_f + t_b);
        const Timeline t = simulate(build_schedule(test::schedule(ScheduleKind::GPipe, K, M)),
                                    unit_cost(t_f, t_b, 1));
        REQUIRE(t.makespan == expected);
        REQUIRE(t.bubble_fraction() == Approx(double(K - 1) / (M + K - 1)));
        REQUIRE(makespan(test::schedule(ScheduleKind::OneFOneB, K, M), t_f, t_b) == expected);
      }
    }
  }
}

// Theory: with M ≥ K, looping with v chunks has bubble (K-1)(t_f+t_b)/v,
// GPipe's divided by v: breadth-first because each chunk's pass is a
// full pipeline whose fill overlaps the previous chunk's micro-batches;
// depth-first (see schedule_builders.cpp) holds it for every M ≥ K here.
// With M < K the hand-over between chunks stalls; never worse than GPipe.
// The bubble is the devices' time computing nothing: the frozen forward and
// the optimizer step are compute (before, they counted as idle, and one
// device alone with a frozen prefix reported a bubble of 0.15).
TEST_CASE("the frozen forward and the optimizer step are compute: one device never idles, a pipeline's "
          "bubble is its fill and drain",
          "[schedule]") {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0.1, 3.0);
  for (int trial = 0; trial < 200; ++trial) {
    const int K = trial % 2 == 0 ? 1 : 2 + trial % 3;
    const int M = 1 + static_cast<int>(rng() % 8);
    ScheduleOptions o = test::schedule(trial % 4 < 2 ? ScheduleKind::GPipe : ScheduleKind::OneFOneB, K, M);
    o.optimizer_step = true;
    o.frozen_input = trial % 3 == 0 ? FrozenInput::ForwardAndCacheWrite : FrozenInput::Forward;
    const double t_f = u(rng), t_b = u(rng), t_fz = u(rng), t_opt = u(rng);
    const Timeline t = simulate(build_schedule(o), [&](const Action& a) {
      switch (a.kind) {
        case ActionKind::Forward: return t_f;
        case ActionKind::Backward: return t_b;
        case ActionKind::FrozenForward: return t_fz;
        case ActionKind::OptimizerStep: return t_opt;
        default: return 0.0;  // transfers and the cache write take no time here
      }
    });
    INFO("trial " << trial << " K=" << K << " M=" << M);
    const double compute = K * (M * (t_f + t_b) + t_opt) + M * t_fz;
    REQUIRE(t.compute_time == Approx(compute));
    REQUIRE(t.bubble_fraction() == Approx(std::max(0.0, 1.0 - compute / (K * t.makespan))).margin(1e-12));
    if (K == 1) REQUIRE(t.bubble_fraction() == Approx(0.0).margin(1e-12));
    if (K > 1) REQUIRE(t.bubble_fraction() > 0);
  }
}

TEST_CASE("looping shrinks GPipe's bubble by v = 2 when M >= K, never grows it",
          "[schedule]") {
  for (ScheduleKind kind : {ScheduleKind::LoopingBreadthFirst, ScheduleKind::LoopingDepthFirst}) {
    for (int K : {1, 2, 4, 8}) {
      for (int M = 1; M <= 6 * K; ++M) {
        for (auto [t_f, t_b] : {std::pair{1.0, 2.0}, {0.5, 1.5}, {3.0, 1.0}}) {
          const ScheduleOptions o = test::schedule(kind, K, M, 2);
          INFO(describe(o) << " t_f=" << t_f << " t_b=" << t_b);
          const double gpipe = makespan(test::schedule(ScheduleKind::GPipe, K, M), t_f, t_b) -
                               M * (t_f + t_b);
          const double bubble = makespan(o, t_f, t_b) - M * (t_f + t_b);
          if (M >= K) {
            REQUIRE(bubble * 2 == gpipe);
          } else {
            REQUIRE(bubble <= gpipe);
          }
        }
      }
    }
  }
}

TEST_CASE("simulate: transfers, all-reduce overlap, optimizer", "[schedule]") {
  SECTION("a receive starts after its send and carries the transfer time") {
    const Schedule s = build_schedule(test::schedule(ScheduleKind::GPipe, 2, 1));
    const Timeline t = simulate(s, [](const Action& a) {
      switch (a.kind) {
        case ActionKind::Forward: return 1.0;
        case ActionKind::Backward: return 2.0;
        case ActionKind::RecvAct:
        case ActionKind::RecvGrad: return 0.5;
        default: return 0.0;
      }
    });
    // 0F0 [0,1], 1RECV_F0 [1,1.5], 1F0 [1.5,2.5], 1B0 [2.5,4.5],
    // 0RECV_B0 [4.5,5], 0B0 [5,7].
    CHECK(t.makespan == 7.0);
    CHECK(t.per_device[1][index_of(s.devices[1], parse_action("1RECV_F0<0"))] ==
          ActionTiming{1.0, 1.5});
    CHECK(t.per_device[0][index_of(s.devices[0], parse_action("0B0"))] == ActionTiming{5.0, 7.0});
    CHECK(t.compute_time == 6.0);
    CHECK(t.bubble_fraction() == Approx(1.0 - 6.0 / 14.0));
  }
  SECTION("all-reduces overlap later compute, serialise among themselves") {
    ScheduleOptions o = test::schedule(ScheduleKind::LoopingBreadthFirst, 1, 2, 2);
    o.buckets_per_stage = {1, 1};
    o.optimizer_step = true;
    const Schedule s = build_schedule(o);
    REQUIRE(s.devices[0] == parse_schedule_csv("# schedule=looping_bf K=1 M=2 v=2\n"
                                               "0,0F0,0F1,1F0,1F1,1B1,1B0,1AR0,0B1,0B0,0AR0,"
                                               "0OPT,1OPT\n")
                                .devices[0]);
    const auto base = unit_cost(2, 2, 2);
    const auto cost = [&](double allreduce) {
      return [=](const Action& a) {
        return a.kind == ActionKind::AllReduce       ? allreduce
               : a.kind == ActionKind::OptimizerStep ? 1.0
                                                     : base(a);
      };
    };
    // Compute ends at 8; 1AR0 [6,9] overlaps 0B1 0B0; 0AR0 [9,12];
    // 0OPT [12,13] waits for 0AR0; 1OPT [13,14].
    CHECK(simulate(s, cost(3)).makespan == 14.0);
    // 1AR0 [6,16] delays 0AR0 to [16,26].
    CHECK(simulate(s, cost(10)).makespan == 28.0);
  }
  SECTION("bad durations and deadlocks throw") {
    const Schedule s = build_schedule(test::schedule(ScheduleKind::GPipe, 2, 2));
    CHECK_THROWS_AS(simulate(s, [](const Action&) { return -1.0; }), Error);
    Schedule stuck = s;
    std::swap(stuck.devices[1][0], stuck.devices[1][1]);  // 1F0 before its receive
    CHECK_THROWS_WITH(simulate(stuck, unit_cost(1, 1, 1)),
                      Catch::Contains("deadlock") && Catch::Contains("[[1F0]]"));
  }
}

TEST_CASE("depth-first looping K=8, M=48, v=2 with buckets and optimizer: exact makespan", "[schedule]") {
  // Speed is measured in bench/bench_planner, not here.
  ScheduleOptions o = test::schedule(ScheduleKind::LoopingDepthFirst, 8, 48, 2);
  o.buckets_per_stage.assign(16, 3);
  o.optimizer_step = true;
  const Schedule s = build_schedule(o);
  CHECK(simulate(s, unit_cost(1, 2, 2)).makespan == 48 * 3.0 + 7 * 3.0 / 2);
}

TEST_CASE("render_timeline draws unit slots, idle as dots", "[schedule]") {
  const Schedule s = build_schedule(test::schedule(ScheduleKind::GPipe, 2, 2));
  CHECK(render_timeline(simulate(s, unit_cost(1, 1, 1)), s) ==
        "dev 0 | 0F0 0F1 ... ... 0B1 0B0\n"
        "dev 1 | ... 1F0 1F1 1B1 1B0 ...\n");
  const Schedule f = build_schedule(test::schedule(ScheduleKind::OneFOneB, 2, 2));
  CHECK(render_timeline(simulate(f, unit_cost(1, 2, 1)), f) ==
        "dev 0 | 0F0 0F1 ... ... 0B0 --- ... 0B1 ---\n"
        "dev 1 | ... 1F0 1B0 --- 1F1 1B1 --- ... ...\n");
}
