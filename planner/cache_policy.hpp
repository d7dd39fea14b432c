// AutoCache's decision (SPEC §5): cache the frozen prefix's output when a
// cache read is predicted to be cheaper than recomputing F_frozen.
#pragma once

#include <string>

#include "planner/cost_model.hpp"

namespace ep {

struct CacheDecision {
  bool on = false;
  CacheTier tier = CacheTier::HostMemory;  // host memory if the node's cache fits, else disk
  double bytes_per_node = 0;               // the whole cache of one node's shard
  double read_s = 0;                       // one micro-batch, predicted
  double frozen_forward_s = 0;             // one micro-batch, predicted
  std::string reason;
};

// `micro_batch`: samples per read. Policy off/on is obeyed (on with nothing
// frozen, or without AutoPipe, is off: there is no separate frozen output to cache).
[[nodiscard]] CacheDecision decide_cache(const Config&, const ModelSpec&, const CostModel&,
                                         int frozen_layers, int micro_batch);

[[nodiscard]] std::string to_string(CacheTier);

}  // namespace ep
