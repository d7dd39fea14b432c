// The collective models (sim.collectives): each against the ring's formula
// on an idle network, and the coarse models' two nodes standing for all
// against simulating every replica.
//
// One Simulator per TEST_CASE (SimGrid allows one engine per process; ctest
// runs each TEST_CASE in its own process).
#include <catch2/catch.hpp>

#include <numeric>
#include <random>
#include <set>

#include "support.hpp"

using namespace ep;
using ep::sim::Simulator;

namespace {
constexpr LinkSpec kPcie{10e9, 5e-6};
constexpr LinkSpec kIb{5e9, 3e-6};
constexpr CollectiveModel kModels[] = {CollectiveModel::Steps, CollectiveModel::Phases, CollectiveModel::Analytic};

// One stage, one all-reduce bucket of S bytes, per replica.
sim::SimRequest lone_allreduce(double S, const std::vector<int>& first_gpus, CollectiveModel model) {
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

TEST_CASE("every collective model costs a lone ring all-reduce 2(n-1) (latency + S/n / bandwidth)",
          "[sim][collectives]") {
  Simulator sim(test::cluster(1, 8, kPcie));
  const double S = 80e6;  // divisible by every n: chunks are whole bytes
  for (const CollectiveModel model : kModels)
    for (const int n : {2, 4, 8}) {
      CAPTURE(to_string(model), n);
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
  for (const CollectiveModel model : kModels)
    for (const int nodes : {2, 3, 4}) {
      CAPTURE(to_string(model), nodes);
      const int n = 2 * nodes;
      std::vector<int> first(n);
      std::iota(first.begin(), first.end(), 0);
      const auto r = sim.run(lone_allreduce(S, first, model));
      const double expected = 2.0 * (n - 1) * (hop_latency + S / n / kIb.bandwidth_bytes_per_s);
      // steps: a rank behind a fast hop starts its next step a little early.
      CHECK(r.iteration_end_s.at(0) == Approx(expected).epsilon(model == CollectiveModel::Steps ? 0.02 : 1e-6));
    }
}

TEST_CASE("phases and analytic: two nodes stand for all of them exactly, over random layouts and schedules",
          "[sim][collectives]") {
  constexpr int kNodes = 6, kI = 4;
  ClusterSpec c = test::cluster(kNodes, kI, kPcie, kIb);
  Simulator sim(c);
  std::mt19937 rng(28);
  const auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int instance = 0; instance < 24; ++instance) {
    const int K = std::vector<int>{1, 2, 4}[pick(0, 2)];
    ScheduleOptions o;
    o.kind = pick(0, 1) ? ScheduleKind::GPipe : ScheduleKind::OneFOneB;
    o.K = K;
    o.M = K * pick(1, 3);
    o.buckets_per_stage.assign(K, pick(1, 3));
    o.optimizer_step = true;
    o.frozen_input = pick(0, 1) ? FrozenInput::CacheRead : FrozenInput::None;
    const double t_f = 1e-3 * pick(1, 9), t_b = 2e-3 * pick(1, 9);
    auto q = test::request(build_schedule(o), test::costs(unit_cost(t_f, t_b, 1), 1e6 * pick(1, 64), 1e6 * pick(1, 400)));
    const int nodes = pick(3, kNodes);
    const bool drop_last = pick(0, 3) == 0;
    place(q, nodes, kI, K, kI / K, drop_last);
    q.iterations = pick(1, 2);
    q.collectives = pick(0, 1) ? CollectiveModel::Phases : CollectiveModel::Analytic;
    CAPTURE(instance, K, o.M, nodes, drop_last, to_string(q.collectives), q.replica_gpus.size());
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

TEST_CASE("a traced coarse run holds the two nodes that stand for all", "[sim][collectives]") {
  Simulator sim(test::cluster(4, 2, kPcie, kIb));
  // steps simulates every replica (its outputs stay the golden ones).
  for (const CollectiveModel model : {CollectiveModel::Phases, CollectiveModel::Analytic}) {
    CAPTURE(to_string(model));
    auto q = lone_allreduce(8e6, {0, 1, 2, 3, 4, 5, 6, 7}, model);
    trace::Trace tr;
    (void)sim.run(q, &tr);
    std::set<int> nodes;
    for (const auto& e : tr.events)
      if (tr.tracks.at(e.track).kind == trace::TrackKind::Gpu) nodes.insert(tr.tracks.at(e.track).node);
    CHECK(nodes == std::set<int>{0, 1});
  }
}
