// Schedules run on the simulator against the planner's analytic answers.
//
// Each TEST_CASE constructs at most one Simulator: SimGrid allows one
// engine per process, and ctest runs every TEST_CASE in its own process
// (catch_discover_tests). So no SECTIONs around a Simulator (Catch re-runs
// the test case body once per section), and run the binary by hand one
// test case at a time.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include "planner/autodp.hpp"
#include "planner/autopipe.hpp"
#include "planner/error.hpp"
#include "sim/driver.hpp"
#include "support.hpp"

using namespace ep;
using ep::sim::Simulator;

namespace {


bool is_compute_category(const std::string& c) {
  return c == "forward" || c == "backward" || c == "frozen_forward" || c == "optimizer";
}

}  // namespace

TEST_CASE("equal stages over free links take (M+K-1)(t_f+t_b)", "[sim][schedule]") {
  // Free links with non-zero bytes: the transfers run through the network
  // and cost ~1e-15 s each.
  Simulator sim(test::cluster(1, 8, test::kFreeLink));
  const double t_f = 1e-3, t_b = 2e-3;
  for (const auto kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB}) {
    for (const int K : {1, 2, 4, 8}) {
      for (const int M : {1, K, 3 * K + 1}) {
        CAPTURE(to_string(kind), K, M);
        const auto r = sim.run(test::request(build_schedule(test::schedule(kind, K, M)),
                                             test::costs(unit_cost(t_f, t_b, 1), 1000)));
        CHECK(r.iteration_end_s.at(0) == Approx((M + K - 1) * (t_f + t_b)).epsilon(0.001));
        CHECK(r.compute_s == Approx(M * (t_f + t_b)).epsilon(1e-9));
      }
    }
  }
  for (const auto kind : {ScheduleKind::LoopingBreadthFirst, ScheduleKind::LoopingDepthFirst}) {
    for (const int M : {4, 8, 13}) {
      CAPTURE(to_string(kind), M);
      const Schedule s = build_schedule(test::schedule(kind, 4, M, 2));
      const double planner = simulate(s, unit_cost(t_f, t_b, 2)).makespan;
      const auto r = sim.run(test::request(s, test::costs(unit_cost(t_f, t_b, 2), 1000)));
      CHECK(r.iteration_end_s.at(0) == Approx(planner).epsilon(0.001));
    }
  }
}

TEST_CASE("iterations run back to back", "[sim][schedule]") {
  Simulator sim(test::cluster(1, 4, test::kFreeLink));
  auto q = test::request(build_schedule(test::schedule(ScheduleKind::GPipe, 4, 8)), test::costs(unit_cost(1e-3, 2e-3, 1), 0));
  q.iterations = 3;
  const auto r = sim.run(q);
  REQUIRE(r.iteration_end_s.size() == 3);
  // A device starts iteration i+1 as soon as it finished i, so later
  // iterations overlap the previous one's drain: each adds at most one.
  const double one = (8 + 4 - 1) * 3e-3;
  CHECK(r.iteration_end_s[0] == Approx(one));
  CHECK(r.iteration_end_s[1] - r.iteration_end_s[0] <= one * (1 + 1e-9));
  CHECK(r.iteration_end_s[2] - r.iteration_end_s[1] <= one * (1 + 1e-9));
  CHECK(r.compute_s == Approx(8 * 3e-3));
}

TEST_CASE("DDP: an all-reduce hides under the backward pass until it is longer", "[sim][schedule][ddp]") {
  // Two replicas of K = 2 on one node, no link latency. Stage 1's bucket is
  // issued after device 1's last backward, t_b before device 0 finishes its
  // own; stage 0's bucket is empty. So the iteration takes
  // max(T, T - t_b + a) with T the no-communication time and a = S/B the
  // 2-rank all-reduce (2(n-1)/n = 1).
  const LinkSpec pcie{10e9, 0};
  Simulator sim(test::cluster(1, 4, pcie));
  const double t_f = 0.01, t_b = 0.02;
  const int K = 2, M = 4;
  ScheduleOptions o = test::schedule(ScheduleKind::GPipe, K, M);
  o.buckets_per_stage = {1, 1};
  o.optimizer_step = true;
  const double T = (M + K - 1) * (t_f + t_b);
  for (const double a : {0.1 * t_b, 5 * t_b}) {
    CAPTURE(a);
    IterationCosts c = test::costs(unit_cost(t_f, t_b, 1), 0);
    c.bytes = [&](const Action& x) {
      return x.kind == ActionKind::AllReduce && x.stage == 1 ? a * pcie.bandwidth_bytes_per_s : 0.0;
    };
    const auto r = sim.run(test::request(build_schedule(o), c, {0, 2}));
    CHECK(r.iteration_end_s.at(0) == Approx(std::max(T, T - t_b + a)).epsilon(0.001));
    CHECK(r.allreduce_s == Approx(a / 2).epsilon(0.001));  // half the devices all-reduce
  }
}

TEST_CASE("a traced run conserves every action, compute never overlaps, flows pair up", "[sim][trace]") {
  Simulator sim(test::cluster(2, 4, {10e9, 5e-6}, {5e9, 2e-6}));
  ScheduleOptions o = test::schedule(ScheduleKind::LoopingDepthFirst, 4, 8, 2);
  o.buckets_per_stage.assign(8, 2);
  o.optimizer_step = true;
  o.frozen_input = FrozenInput::Advance;  // CR, FZ, CW before each stage-0 forward
  const Schedule s = build_schedule(o);
  IterationCosts c;
  c.duration = [](const Action& a) { return a.kind == ActionKind::Backward ? 2e-3 : 1e-3 * (1 + a.stage % 3); };
  c.bytes = [](const Action& a) {
    return is_transfer(a.kind) ? 1e6 * (1 + a.microbatch % 2)
           : a.kind == ActionKind::AllReduce ? 4e6
           : a.kind == ActionKind::CacheRead || a.kind == ActionKind::CacheWrite ? 2e6
                                                                                  : 0.0;
  };
  auto q = test::request(s, c, {0, 4});
  q.cache_tier = CacheTier::Disk;
  q.iterations = 2;
  q.plan_id = 7;
  trace::Trace tr;
  const auto r = sim.run(q, &tr);
  (void)sim.run(q, &tr);  // a second run into the same trace: flow ids stay unique

  // Every action of every replica, once per iteration, on its GPU's track
  // (any lane of it: asynchronous sends and all-reduces take extra lanes).
  using Key = std::tuple<int, int, std::string, int>;  // replica, iteration, name, global GPU
  std::map<Key, int> expected, found;
  for (int run = 0; run < 2; ++run)
    for (std::size_t rep = 0; rep < q.replica_gpus.size(); ++rep)
      for (int it = 0; it < q.iterations; ++it)
        for (int d = 0; d < s.K; ++d)
          for (const Action& a : s.devices[d]) ++expected[{q.replica_rank[rep], it, to_string(a), q.replica_gpus[rep][d]}];
  std::set<std::int64_t> sends, recvs;
  int link_events = 0, ring_steps_on_links = 0;
  for (const auto& e : tr.events) {
    CHECK(e.end_s >= e.start_s);
    CHECK(e.start_s >= 0);
    CHECK(e.plan_id == 7);
    const auto& track = tr.tracks.at(e.track);
    if (track.kind == trace::TrackKind::Link) {
      ++link_events;
      ring_steps_on_links += e.category == "allreduce";
      continue;
    }
    ++found[{e.replica, e.iteration, e.name, track.node * 4 + track.index}];
    if (track.lane == 0)  // the device's own lane holds only what the device runs
      CHECK((e.category != "send" && e.category != "allreduce"));
    if (e.category == "send") CHECK(sends.insert(e.flow_out).second);
    if (e.category == "recv") CHECK(recvs.insert(e.flow_in).second);
  }
  CHECK(found == expected);
  CHECK(sends == recvs);
  CHECK(*sends.begin() > 0);
  CHECK(link_events > 0);
  CHECK(ring_steps_on_links > 0);
  // Both runs start at 0, so compute spans are checked per run: the first
  // run's events are the first half.
  std::map<int, std::vector<std::pair<double, double>>> first_run;
  for (std::size_t i = 0; i < tr.events.size() / 2; ++i) {
    const auto& e = tr.events[i];
    if (tr.tracks.at(e.track).kind == trace::TrackKind::Gpu && is_compute_category(e.category))
      first_run[e.track].emplace_back(e.start_s, e.end_s);
  }
  for (auto& [track, spans] : first_run) {
    CAPTURE(track);
    std::sort(spans.begin(), spans.end());
    for (std::size_t i = 1; i < spans.size(); ++i) CHECK(spans[i].first >= spans[i - 1].second - 1e-12);
  }
  CHECK(r.cache_io_s > 0);
  CHECK(r.allreduce_s > 0);
}

TEST_CASE("a paper iteration matches the planner's prediction", "[sim][schedule][paper]") {
  // BERT-base on SST-2, K = 8 on one node, one replica (no all-reduce). The
  // simulator runs the planner's own durations, and a transfer alone on its
  // route costs exactly the planner's latency + bytes / B, so only link
  // sharing can make them differ: two transfers crossing one PCIe link at
  // once, which the analytic model charges as if each had it alone. A
  // receiver takes one transfer at a time and the schedules rarely overlap
  // two on one link (measured: equal to 1e-6 for all three kinds); each
  // overlap would cost at most one activation transfer, ~0.2 ms of a
  // ~0.25 s iteration (0.07%). Hence 0.5%.
  std::unique_ptr<Simulator> sim;
  for (const std::string kind : {"gpipe", "1f1b", "looping_df"}) {
    const int v = kind == "looping_df" ? 2 : 1;
    const Config c = load_config(test::repo_path("configs/paper/bert_base_sst2.toml"),
                                 {"planner.schedule=" + kind, "planner.virtual_stages=" + std::to_string(v)});
    const AnalyticCostModel cost(c.cluster, c.training);
    const PlanContext ctx(c, cost);
    if (!sim) sim = std::make_unique<Simulator>(c.cluster);
    const int K = c.planner.K;
    for (const int M : {K, 2 * K, 6 * K}) {
      CAPTURE(kind, M);
      IterationSetup setup;
      setup.partition = plan_partition(ctx, 0, K * v, false);
      setup.K = K;
      setup.v = v;
      setup.M = M;
      setup.batch = c.training.batch_size;
      sim::SimRequest q;
      q.schedule = build_schedule(schedule_options(ctx, setup));
      q.costs = iteration_costs(ctx, setup);
      q.replica_gpus = {autodp_layout(c.cluster, K).replica.at(0).gpus};
      CHECK(sim->run(q).iteration_end_s.at(0) == Approx(predict_iteration(ctx, setup).makespan).epsilon(0.005));
    }
  }
}

TEST_CASE("a node's replicas reading the cache at once: the planner's prediction matches the simulator's",
          "[sim][schedule][cache]") {
  // ViT-B/16 with 8 layers frozen, K = 1, the cache read every micro-batch,
  // 1, 2, 4 and 8 replicas on one node whose host memory (1 GB/s) and disk
  // (0.5 GB/s) bind when shared. SimGrid shares the memory link and disk
  // among the stage-0 GPUs reading at once; the planner charges each read
  // copiers · bytes / the node's bandwidth, so they agree (the simulator
  // also pays half a PCIe latency per read, and its ring all-reduce the
  // analytic formula's).
  const Config c = load_config(test::repo_path("configs/paper/vit_imagenet.toml"),
                               {"cluster.nodes=1", "cluster.host.memory_bandwidth_bytes_per_s=1e9",
                                "cluster.host.disk_bandwidth_bytes_per_s=0.5e9"});
  const AnalyticCostModel cost(c.cluster, c.training);
  const PlanContext ctx(c, cost);
  Simulator sim(c.cluster);
  for (const CacheTier tier : {CacheTier::HostMemory, CacheTier::Disk}) {
    double alone_s = 0;
    for (const int replicas : {1, 2, 4, 8}) {
      CAPTURE(static_cast<int>(tier), replicas);
      IterationSetup setup;
      setup.partition = plan_partition(ctx, 8, 1, true);
      setup.M = 2;
      setup.replicas = replicas;
      setup.cache_on = true;
      setup.cache_tier = tier;
      setup.batch = c.training.batch_size;
      const double predicted = predict_iteration(ctx, setup).makespan;
      CHECK(sim.run(sim::program_request(ctx, sim::read_sim_config(c), lower_iteration(ctx, setup))).iteration_end_s.at(0) ==
            Approx(predicted).epsilon(0.005));
      // Sharing binds: eight readers take far longer than one.
      if (replicas == 1) alone_s = predicted;
      if (replicas == 8) CHECK(predicted > 1.5 * alone_s);
    }
  }
}

TEST_CASE("bad requests are ep::Errors naming the problem", "[sim][errors]") {
  Simulator sim(test::cluster(1, 4, test::kFreeLink));
  const Schedule s = build_schedule(test::schedule(ScheduleKind::GPipe, 4, 4));
  auto q = test::request(s, test::costs(unit_cost(1, 2, 1), 0));
  auto short_map = q;
  short_map.replica_gpus = {{0, 1}};
  CHECK_THROWS_WITH(sim.run(short_map), Catch::Contains("has 4 devices but replica 0 maps 2 GPUs"));
  auto twice = q;
  twice.replica_gpus = {{0, 1, 2, 3}, {3, 2, 1, 0}};
  CHECK_THROWS_WITH(sim.run(twice), Catch::Contains("GPU 3 is mapped twice"));
  auto outside = q;
  outside.replica_gpus = {{0, 1, 2, 4}};
  CHECK_THROWS_WITH(sim.run(outside), Catch::Contains("outside the cluster"));
  auto broken = q;
  broken.schedule.devices[1].pop_back();
  CHECK_THROWS_WITH(sim.run(broken), Catch::Contains("invalid schedule"));
  auto negative = q;
  negative.costs.duration = [](const Action&) { return -1.0; };
  CHECK_THROWS_WITH(sim.run(negative), Catch::Contains("duration of"));
  auto no_iterations = q;
  no_iterations.iterations = 0;
  CHECK_THROWS_AS(sim.run(no_iterations), Error);
  CHECK(sim.run(q).iteration_end_s.at(0) == Approx(7 * 3));  // the Simulator still works
}

TEST_CASE("the same request twice gives the same doubles", "[sim][determinism]") {
  Simulator sim(test::cluster(2, 4, {10e9, 5e-6}, {5e9, 2e-6}));
  ScheduleOptions o = test::schedule(ScheduleKind::OneFOneB, 4, 12);
  o.buckets_per_stage = {2, 1, 1, 3};
  o.optimizer_step = true;
  auto q = test::request(build_schedule(o), test::costs(unit_cost(1.1e-3, 2.3e-3, 1), 3.3e6, 7.7e6), {0, 4});
  q.iterations = 3;
  const auto a = sim.run(q);
  const auto b = sim.run(q);
  CHECK(a.iteration_end_s == b.iteration_end_s);
  CHECK(a.compute_s == b.compute_s);
  CHECK(a.allreduce_s == b.allreduce_s);
  CHECK(a.p2p_s == b.p2p_s);
  CHECK(a.cache_io_s == b.cache_io_s);
}
