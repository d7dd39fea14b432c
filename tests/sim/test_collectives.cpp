// The collective models (sim.collectives): each against the ring's formula
// on an idle network, and the coarse models' two nodes standing for all
// against simulating every replica.
//
// One Simulator per TEST_CASE (SimGrid allows one engine per process; ctest
// runs each TEST_CASE in its own process).
#include <catch2/catch.hpp>

#include <memory>
#include <numeric>
#include <random>
#include <set>

#include "sim/collectives.hpp"
#include "sim/driver.hpp"
#include "support.hpp"

using namespace ep;
using ep::sim::Simulator;

namespace {
constexpr LinkSpec kPcie{10e9, 5e-6};
constexpr LinkSpec kIb{5e9, 3e-6};
const std::string kModels[] = {"steps", "phases", "analytic"};

// One stage, one all-reduce bucket of S bytes, per replica.
sim::SimRequest lone_allreduce(double S, const std::vector<int>& first_gpus, const std::string& model) {
  ScheduleOptions o;
  o.buckets_per_stage = {1};
  o.optimizer_step = true;
  auto q = test::request(build_schedule(o), test::costs(unit_cost(0, 0, 1), 0, S), first_gpus);
  q.collectives = model;
  return q;
}

// An AutoDP layout: `pipelines` replicas of K devices on each of the first
// `nodes` nodes of I GPUs, ranks in node order; `drop_last` leaves the
// last node's last pipeline out (nodes no longer alike).
void place(sim::SimRequest& q, int nodes, int I, int K, int pipelines, bool drop_last) {
  q.replica_gpus.clear();
  q.replica_rank.clear();
  for (int n = 0; n < nodes; ++n)
    for (int j = 0; j < pipelines; ++j) {
      if (drop_last && n == nodes - 1 && j == pipelines - 1) continue;
      std::vector<int> gpus;
      for (int d = 0; d < K; ++d) gpus.push_back(n * I + j * K + d);
      q.replica_gpus.push_back(gpus);
      q.replica_rank.push_back(static_cast<int>(q.replica_rank.size()));
    }
}
}  // namespace

TEST_CASE(
    "every collective model costs a lone ring all-reduce 2(n-1) (latency "
    "+ S/n / bandwidth)",
    "[sim][collectives]") {
  Simulator sim(test::cluster(1, 8, kPcie));
  const double S = 80e6;  // divisible by every n: chunks are whole bytes
  for (const std::string& model : kModels)
    for (const int n : {2, 4, 8}) {
      CAPTURE(model, n);
      std::vector<int> first(n);
      std::iota(first.begin(), first.end(), 0);
      const auto r = sim.run(lone_allreduce(S, first, model));
      const double expected = 2.0 * (n - 1) * (kPcie.latency_s + S / n / kPcie.bandwidth_bytes_per_s);
      CHECK(r.iteration_end_s.at(0) == Approx(expected).epsilon(1e-6));
      CHECK(r.allreduce_s == Approx(expected).epsilon(1e-6));
    }
}

TEST_CASE("across nodes a ring is paced by its slowest hop in every collective model", "[sim][collectives]") {
  Simulator sim(test::cluster(4, 2, kPcie, kIb));
  const double S = 48e6;
  const double hop_latency = kPcie.latency_s + kIb.latency_s;  // PCIe, NIC, NIC, PCIe
  for (const std::string& model : kModels)
    for (const int nodes : {2, 3, 4}) {
      CAPTURE(model, nodes);
      const int n = 2 * nodes;
      std::vector<int> first(n);
      std::iota(first.begin(), first.end(), 0);
      const auto r = sim.run(lone_allreduce(S, first, model));
      const double expected = 2.0 * (n - 1) * (hop_latency + S / n / kIb.bandwidth_bytes_per_s);
      // steps: a rank behind a fast hop starts its next step a little early.
      CHECK(r.iteration_end_s.at(0) == Approx(expected).epsilon(model == "steps" ? 0.02 : 1e-6));
    }
}

namespace {
// Over random layouts and schedules on the first 3..nodes nodes: a coarse
// run with two units standing for all gives what simulating every replica
// gives (every result, relative 1e-9).
void check_two_stand_for_all(Simulator& sim, int nodes, int I, unsigned seed) {
  std::mt19937 rng(seed);
  const auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int instance = 0; instance < 24; ++instance) {
    const int K = std::vector<int>{1, 2, 4}[pick(0, I >= 4 ? 2 : 1)];  // K divides I (2 or 4)
    ScheduleOptions o;
    o.kind = pick(0, 1) ? ScheduleKind::GPipe : ScheduleKind::OneFOneB;
    o.K = K;
    o.M = K * pick(1, 3);
    o.buckets_per_stage.assign(K, pick(1, 3));
    o.optimizer_step = true;
    o.frozen_input = pick(0, 1) ? FrozenInput::CacheRead : FrozenInput::None;
    const double t_f = 1e-3 * pick(1, 9), t_b = 2e-3 * pick(1, 9);
    auto q =
        test::request(build_schedule(o), test::costs(unit_cost(t_f, t_b, 1), 1e6 * pick(1, 64), 1e6 * pick(1, 400)));
    const int used = pick(3, nodes);
    const bool drop_last = pick(0, 3) == 0;
    place(q, used, I, K, I / K, drop_last);
    q.iterations = pick(1, 2);
    q.collectives = pick(0, 1) ? "phases" : "analytic";
    CAPTURE(instance, K, o.M, used, drop_last, q.collectives, q.replica_gpus.size());
    auto whole = q;
    whole.every_replica = true;
    const auto two = sim.run(q);
    const auto all = sim.run(whole);
    REQUIRE(two.iteration_end_s.size() == all.iteration_end_s.size());
    for (std::size_t i = 0; i < all.iteration_end_s.size(); ++i)
      CHECK(two.iteration_end_s[i] == Approx(all.iteration_end_s[i]).epsilon(1e-9));
    CHECK(two.compute_s == Approx(all.compute_s).epsilon(1e-9));
    CHECK(two.allreduce_s == Approx(all.allreduce_s).epsilon(1e-9));
    CHECK(two.p2p_s == Approx(all.p2p_s).epsilon(1e-9));
    CHECK(two.cache_io_s == Approx(all.cache_io_s).epsilon(1e-9));
  }
}

// The nodes whose GPUs a traced lone all-reduce over every GPU shows.
std::set<int> traced_nodes(Simulator& sim, int gpus, const std::string& model) {
  std::vector<int> first(gpus);
  std::iota(first.begin(), first.end(), 0);
  trace::Trace tr;
  (void)sim.run(lone_allreduce(8e6, first, model), &tr);
  std::set<int> nodes;
  for (const auto& e : tr.events)
    if (tr.tracks.at(e.track).kind == trace::TrackKind::Gpu) nodes.insert(tr.tracks.at(e.track).node);
  return nodes;
}
}  // namespace

TEST_CASE(
    "phases and analytic: two nodes stand for all of them exactly, over "
    "random layouts and schedules",
    "[sim][collectives]") {
  Simulator sim(test::cluster(6, 4, kPcie, kIb));
  check_two_stand_for_all(sim, 6, 4, 28);
}

TEST_CASE(
    "under non-blocking leaf switches without uplink latency two nodes "
    "still stand for all",
    "[sim][collectives]") {
  ClusterSpec c = test::cluster(6, 4, kPcie, kIb);
  c.topology.nodes_per_switch = 2;
  Simulator sim(c);
  check_two_stand_for_all(sim, 6, 4, 29);
  CHECK(traced_nodes(sim, 24, "phases") == std::set<int>{0, 1});
}

TEST_CASE("where hops across leaves are slower two leaves stand for all", "[sim][collectives]") {
  ClusterSpec c = test::cluster(8, 2, kPcie, kIb);
  c.topology = {2, 4, 1e-6};  // leaves of 2 nodes, uplinks at half a NIC's bandwidth
  Simulator sim(c);
  check_two_stand_for_all(sim, 8, 2, 30);
  CHECK(traced_nodes(sim, 16, "analytic") == std::set<int>{0, 1, 2, 3});
}

TEST_CASE("a traced coarse run holds the two nodes that stand for all", "[sim][collectives]") {
  Simulator sim(test::cluster(4, 2, kPcie, kIb));
  // steps simulates every replica (its outputs stay the golden ones).
  for (const std::string model : {"phases", "analytic"}) {
    CAPTURE(model);
    CHECK(traced_nodes(sim, 8, model) == std::set<int>{0, 1});
  }
}

// ---------------------------------------------------------------------------
// The recipe of docs/DESIGN.md ("How to add: a collective model"), followed
// once: a model written and registered here alone, then named by a config.

namespace {

// The ring's whole traffic as one flow per rank: 2(n-1) chunks to the next
// rank while as many arrive, one latency instead of 2(n-1).
class OneFlow final : public sim::CollectiveModel {
 public:
  bool two_nodes_stand_for_all() const override { return false; }
  void all_reduce(sim::RingRank& rank, std::uint64_t chunk) const override {
    rank.exchange(2 * (rank.ranks() - 1) * chunk, "one_flow", -1);
  }
};

// Registered before any Simulator is built: its fork server copies the
// registry.
const bool kOneFlowRegistered = [] {
  sim::register_collective_model("one_flow", std::make_shared<OneFlow>());
  return true;
}();

}  // namespace

TEST_CASE("a registered collective model moves a lone all-reduce as it says", "[sim][collectives]") {
  REQUIRE(kOneFlowRegistered);
  Simulator sim(test::cluster(1, 8, kPcie));
  const double S = 80e6;
  for (const int n : {2, 4, 8}) {
    CAPTURE(n);
    std::vector<int> first(n);
    std::iota(first.begin(), first.end(), 0);
    const auto r = sim.run(lone_allreduce(S, first, "one_flow"));
    const double expected = kPcie.latency_s + 2.0 * (n - 1) * S / n / kPcie.bandwidth_bytes_per_s;
    CHECK(r.allreduce_s == Approx(expected).epsilon(1e-6));
  }
  CHECK_THROWS_WITH(sim.run(lone_allreduce(S, {0, 1}, "tree")), Catch::Contains("no collective model \"tree\""));
  CHECK_THROWS_WITH(sim::register_collective_model("one_flow", std::make_shared<OneFlow>()),
                    Catch::Contains("already registered"));
}

TEST_CASE("a config's sim.collectives names a registered model that moves the run's all-reduces",
          "[sim][collectives]") {
  REQUIRE(kOneFlowRegistered);
  const Config c = test::tiny_bert({"planner.K=1", "sim.collectives=\"one_flow\""});
  Simulator sim(c.cluster);
  sim::RunOptions opt;
  opt.modes = {Mode::Baseline};
  const sim::RunResult r = sim::simulate_training(c, opt, sim);
  int moved = 0, ring_steps = 0;
  for (const auto& e : r.trace.events) {
    moved += e.name.ends_with(" one_flow");
    ring_steps += e.name.find(" step ") != std::string::npos;
  }
  CHECK(moved > 0);
  CHECK(ring_steps == 0);
}
