// The simulator's section of a config, [sim]: its knobs, read and checked
// here (the planner leaves the section to its back end).
#pragma once

#include <string>

#include "planner/config.hpp"

namespace ep::sim {

// Steady-state measurement, tracing, and how an all-reduce moves. The
// transition costs it cannot derive from bytes and FLOPs are the
// cluster's (cluster.transition), which the planner weighs too.
struct SimConfig {
  std::string collectives = "steps";  // a registered collective model (sim/collectives.hpp)
  int warmup_iterations = 1;          // simulated before the measured iterations of a plan
  int measure_iterations = 2;         // measured back to back; must repeat (the period) within 1e-6
  bool trace = true;                  // write a Chrome trace of one iteration per plan
};

// [sim] of the config's document (the defaults for a Config built in code,
// which has none). Throws ep::Error naming file:line, the
// key, what was expected and what was found; an unknown key of [sim] and
// an unregistered collective model are such errors.
[[nodiscard]] SimConfig read_sim_config(const Config&);

}  // namespace ep::sim
