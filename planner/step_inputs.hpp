// What a freeze step is planned from: the run loop's inputs of one step,
// which a run record holds and a checkpoint stores (traces/run_outputs.hpp)
// so that a resumed run plans the same steps again (replay_steps).
#pragma once

#include <optional>

#include "planner/cache_policy.hpp"

namespace ep {

// What every process must plan freeze step T from, alike: the frozen count
// the freeze policy allowed and, where the step probes the cache
// (RunPlanner::probes), the measured cache.
struct StepInputs {
  int frozen_layers = 0;
  std::optional<MeasuredCache> cache;
};

}  // namespace ep
