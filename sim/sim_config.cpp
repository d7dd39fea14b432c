#include "sim/sim_config.hpp"

#include "planner/config_reader.hpp"
#include "sim/collectives.hpp"

namespace ep::sim {

SimConfig read_sim_config(const Config& c) {
  SimConfig s;
  if (!c.document) return s;  // a Config built in code, not read: the defaults
  config_reader::Reader r(*c.document);
  constexpr const char* kIterationsWhy = "iterations simulated per plan, before the period is searched";
  r.choice("sim.collectives", s.collectives, collective_model_names(), false);
  r.integer("sim.warmup_iterations", s.warmup_iterations, false, 0, 100, kIterationsWhy);
  r.integer("sim.measure_iterations", s.measure_iterations, false, 2, 100, kIterationsWhy);
  // Transition costs are the cluster's: the planner weighs them too.
  for (const char* part : {"context_creation_s", "group_setup_s", "group_per_rank_s"})
    if (r.has(std::string("sim.") + part))
      r.fail(std::string("sim.") + part,
             std::string("cluster.transition.") + part + " (transition costs are the cluster's; the planner weighs them)",
             "a key of [sim]");
  r.boolean("sim.trace", s.trace);
  r.reject_unknown_in("sim");
  return s;
}

}  // namespace ep::sim
