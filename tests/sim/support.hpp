// Fixtures for the simulator tests. SimGrid allows one engine per process,
// so every TEST_CASE constructs at most one Simulator; ctest runs each
// TEST_CASE in its own process (catch_discover_tests). Running sim_tests
// by hand runs them in one process: pass one test name at a time.
#pragma once

#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "planner/config.hpp"
#include "planner/schedule.hpp"
#include "sim/simulator.hpp"
#include "tests/planner/support.hpp"

namespace ep::test {

// Effectively free: 1 EB/s, no latency.
inline constexpr LinkSpec kFreeLink{1e18, 0};

inline ClusterSpec cluster(int nodes, int gpus, LinkSpec intra, LinkSpec inter = kFreeLink) {
  ClusterSpec c;
  c.name = "test";
  c.nodes = nodes;
  c.gpus_per_node = gpus;
  c.device.peak_flops_per_s = 1e13;
  c.device.efficiency = 0.5;
  c.device.memory_bytes = 16e9;
  c.device.memory_bandwidth_bytes_per_s = 4e11;
  c.intra_node = intra;
  c.inter_node = inter;
  c.host = {256e9, 1e10, 1e9};
  return c;
}

// Durations from `duration`; every transfer moves `transfer_bytes`, every
// all-reduce bucket `ar_bytes`.
inline IterationCosts costs(DurationFn duration, double transfer_bytes, double ar_bytes = 0) {
  IterationCosts c;
  c.duration = std::move(duration);
  c.bytes = [=](const Action& a) {
    return is_transfer(a.kind) ? transfer_bytes : a.kind == ActionKind::AllReduce ? ar_bytes : 0.0;
  };
  return c;
}

// One replica per entry of `first_gpus`, on GPUs first, first+1, ...
inline sim::SimRequest request(Schedule s, IterationCosts c, const std::vector<int>& first_gpus = {0}) {
  sim::SimRequest q;
  for (const int g : first_gpus) {
    q.replica_gpus.emplace_back(s.K);
    std::iota(q.replica_gpus.back().begin(), q.replica_gpus.back().end(), g);
    q.replica_rank.push_back(g);
  }
  q.schedule = std::move(s);
  q.costs = std::move(c);
  return q;
}

}  // namespace ep::test
