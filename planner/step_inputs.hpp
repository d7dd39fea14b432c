// What a freeze step is planned from: the run loop's inputs of one step,
// which a run record holds and a checkpoint stores (traces/run_outputs.hpp)
// so that a resumed run plans the same steps again (replay_steps).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "planner/cache_policy.hpp"

namespace ep {

// What every process must plan freeze step T from, alike: the frozen layers
// the freeze policy allowed and, where the step probes the cache
// (RunPlanner::probes), the measured cache.
struct StepInputs {
  int frozen_layers = 0;
  std::optional<MeasuredCache> cache;
  // A per-layer policy's layers frozen past that prefix (sorted; decision
  // 0037), as allowed or as the planner chose them by time.
  std::vector<int> frozen_inside;
  std::string frozen_set_reason;  // where the planner chose them: Plan::frozen_set_reason
};

}  // namespace ep
