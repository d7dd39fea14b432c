// The planner's event-driven timing of a schedule: when each action of
// each device starts and ends under a duration per action. The chunk
// search, the time objective and `elasticpipe schedule` use it; the
// simulator replaces it with SimGrid's network and contention.
#pragma once

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "planner/schedule.hpp"

namespace ep {

struct ActionTiming {
  double start = 0;
  double end = 0;
  friend bool operator==(const ActionTiming&, const ActionTiming&) = default;
};

struct Timeline {
  double makespan = 0;
  double compute_time = 0;  // Σ over devices of compute durations (is_compute)
  std::vector<std::vector<ActionTiming>> per_device;  // parallel to Schedule::devices

  // Share of the devices' time in which they compute nothing:
  // 1 − compute_time / (K · makespan). F, B, the frozen forward and the
  // optimizer step are compute; waiting on a transfer, an all-reduce or a
  // cache read is idle. One device alone idles only where it waits on
  // such; a pipeline adds its fill and drain.
  [[nodiscard]] double bubble_fraction() const;
};

// The bubble's one formula, for the planner's timeline, the simulator's
// runs and the executor's traced iterations: 1 − compute / capacity (device
// seconds), never below 0 (rounding).
[[nodiscard]] inline double idle_share(double compute, double capacity) {
  return capacity > 0 ? std::max(0.0, 1.0 - compute / capacity) : 0.0;
}

using DurationFn = std::function<double(const Action&)>;

// Balanced stages: t_f and t_b are one micro-batch's forward and backward
// time on one device (all its v chunks), so one chunk's F costs t_f / v and
// B costs t_b / v; every other action costs 0.
[[nodiscard]] DurationFn unit_cost(double t_f, double t_b, int v);

// Event-driven evaluation in O(actions). Each device runs its list in order;
// an action starts when the device is free and its dependencies are done:
//   F(s,m) needs F(s-1,m) (same device) or RecvAct(s,m);
//   B(s,m) needs F(s,m) and B(s+1,m) (same device) or RecvGrad(s,m);
//   SendAct(s,m) needs F(s,m), SendGrad(s,m) needs B(s,m);
//   a recv starts once its send has ended (NCCL p2p is a rendezvous) and
//   takes duration(recv): the transfer is charged to the receiver; a send
//   occupies its device for duration(send) (0 for an asynchronous send).
// AllReduce runs on the device's own collective lane (DDP's comm stream):
// issued when the device reaches it, serialised with the device's other
// all-reduces, overlapping later compute. OptimizerStep(s) waits for stage
// s's all-reduces. Durations must be finite and ≥ 0.
// Throws ep::Error (with the marked grid) on deadlock; run check_schedule
// first for the static diagnostics.
[[nodiscard]] Timeline simulate(const Schedule&, const DurationFn& duration);

// One row per device, time left to right in slots of `slot` seconds
// (0: the shortest F/B duration). A slot shows the action running at its
// middle: its text in the first slot, `-` in the following ones, `.` when
// idle. Zero-length actions and the all-reduce lane are not drawn.
[[nodiscard]] std::string render_timeline(const Timeline&, const Schedule&, double slot = 0);

}  // namespace ep
