// Collective models (sim.collectives): how the simulator moves one
// all-reduce over its ring of ranks (docs/SIMULATOR.md, "Collective
// models", has each built-in one's error against steps). Built in:
// - steps: every step of the ring, 2(n-1) flows per rank;
// - phases: each reduce-scatter and all-gather phase as one flow per rank
//   (the phase's bytes, the latency of its n-1 steps), two nodes standing
//   for all;
// - analytic: no flow; the ring's closed form over its slowest route
//   (latency and bandwidth), two nodes standing for all as in phases.
// A model sees its ring only through RingRank, so it needs no SimGrid.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ep::sim {

// One rank of a ring during an all-reduce: what a model may do with it.
class RingRank {
 public:
  virtual ~RingRank() = default;
  // The all-reduce's ranks n (at least 2 when a model is called).
  [[nodiscard]] virtual int ranks() const = 0;
  // One flow of `bytes` to the next rank while one arrives from the
  // previous; returns when both have landed. Traced as "<what>", or
  // "<what> <step>" where step >= 0.
  virtual void exchange(std::uint64_t bytes, const char* what, int step) = 0;
  // Returns once every simulated rank of the ring has called it as often.
  virtual void meet() = 0;
  // Lets `seconds` of simulated time pass.
  virtual void wait(double seconds) = 0;
  // The ring's slowest hop, which paces every step: the largest route
  // latency (s) and the smallest link bandwidth (bytes/s) between
  // consecutive ranks.
  [[nodiscard]] virtual double latency() = 0;
  [[nodiscard]] virtual double bandwidth() = 0;
};

class CollectiveModel {
 public:
  virtual ~CollectiveModel() = default;
  // Whether two nodes may stand for all (simulator.hpp): true only where
  // each rank's flows and waits do not depend on how many nodes are
  // simulated beyond the ring's n, so that two nodes holding the same
  // replicas see exactly what the whole ring would.
  [[nodiscard]] virtual bool two_nodes_stand_for_all() const = 0;
  // One all-reduce as seen by `rank`: every rank holds `chunk` = bytes / n
  // (chunk > 0, n >= 2). Returns when the rank's part has ended.
  virtual void all_reduce(RingRank& rank, std::uint64_t chunk) const = 0;
};

// Adds a model under `name` (lower_snake_case; throws ep::Error where it
// is taken or malformed). Register before the Simulator is built: its
// fork server copies the registry then, and runs there look models up.
void register_collective_model(const std::string& name, std::shared_ptr<const CollectiveModel> model);
// The names a config may give sim.collectives, built-ins first.
[[nodiscard]] std::vector<std::string> collective_model_names();
// The model of that name; nullptr where none is registered.
[[nodiscard]] std::shared_ptr<const CollectiveModel> find_collective_model(const std::string& name);

}  // namespace ep::sim
