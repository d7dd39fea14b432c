// The part of an epoch's row that the plan decides, the same for both back
// ends; each adds what it measured (iteration time, throughput, bubbles,
// communication, loss and accuracy).
#pragma once

#include <string>

#include "planner/run_plan.hpp"
#include "traces/trace.hpp"

namespace ep::trace {

// epoch_s: the epoch's iterations; transition_s: entering the plan, counted
// in the epoch that starts it. cache_filled: the epoch fills or advances
// the cache (no hits). Inline: ep_traces does not link the planner.
[[nodiscard]] inline EpochMetrics plan_epoch_row(const Plan& plan, int epoch, std::string source, std::string mode,
                                                 double epoch_s, double transition_s, bool cache_filled) {
  EpochMetrics m;
  m.source = std::move(source);
  m.mode = std::move(mode);
  m.epoch = epoch;
  m.plan_id = plan.id;
  m.frozen_layers = plan.frozen_layers;
  m.frozen_inside = layer_list(plan.partition.frozen_inside);
  m.K = plan.K;
  m.M = plan.M;
  m.replicas = plan.layout.replicas;
  m.cache = plan.cache.on;
  m.epoch_s = epoch_s + transition_s;
  m.cache_hit_ratio = plan.cache.on && !cache_filled ? 1.0 : 0.0;
  m.transition_s = transition_s;
  return m;
}

}  // namespace ep::trace
