// The part of an epoch's row that the plan decides, the same for both back
// ends; each adds what it measured (iteration time, throughput, bubbles,
// communication, loss and accuracy).
#pragma once

#include <algorithm>
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

// An epoch's frozen layers as the tables print them: "4", or "4+2" with two
// layers frozen inside (decision 0037).
[[nodiscard]] inline std::string frozen_text(const EpochMetrics& m) {
  if (m.frozen_inside == "-") return std::to_string(m.frozen_layers);
  const auto inside = std::count(m.frozen_inside.begin(), m.frozen_inside.end(), ' ') + 1;
  return std::to_string(m.frozen_layers) + "+" + std::to_string(inside);
}

}  // namespace ep::trace
