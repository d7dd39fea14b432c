// One schedule action as a trace event, the same for both back ends: the
// executor's recorded actions and the simulator's timed ones.
#pragma once

#include <algorithm>
#include <cstdint>

#include "planner/schedule.hpp"
#include "traces/trace.hpp"

namespace ep::trace {

// Where and when an action ran, beyond its track and times; -1: not known.
struct ActionContext {
  int replica = -1;         // global rank of the pipeline replica
  int plan_id = -1;
  int iteration = -1;       // within its epoch
  int epoch = -1;
  std::int64_t bytes = -1;  // transfers
};

// The action's text, category, stage, micro-batch and bucket, on `track`
// from start_s to end_s. An end before the start (clocks read on two
// threads) becomes a zero-length span. Flow ids are the caller's: they are
// numbered per trace. Inline: ep_traces does not link the planner, whose
// to_string(Action) names the event.
[[nodiscard]] inline Event action_event(int track, const Action& action, double start_s, double end_s,
                                        const ActionContext& context) {
  Event e;
  e.track = track;
  e.name = to_string(action);
  e.category = action_category(action.kind);
  e.start_s = start_s;
  e.end_s = std::max(end_s, start_s);
  e.stage = action.stage;
  e.microbatch = action.microbatch;
  e.bucket = action.bucket;
  e.replica = context.replica;
  e.plan_id = context.plan_id;
  e.iteration = context.iteration;
  e.epoch = context.epoch;
  e.bytes = context.bytes;
  return e;
}

}  // namespace ep::trace
