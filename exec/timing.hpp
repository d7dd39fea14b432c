// The one way the executor times what a plan or a profile needs (chunk
// candidates, the cache probe, the profiler's figures, `validate`'s
// replicas): one warm-up run, then the median of `runs` timed runs. On a
// GPU the time is the device's, by events around the run (its queue empty
// before), not the host's, which only enqueues the work.
#pragma once

#include <chrono>
#include <vector>

#include "exec/torch_compat.hpp"
#include "planner/stats.hpp"

namespace ep::exec {

using Clock = std::chrono::steady_clock;

[[nodiscard]] inline double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Untimed runs before the timed ones: the first run pays for allocations,
// thread-pool start-up and caches that later runs find warm.
inline constexpr int kWarmupRuns = 1;

// `prepare` runs untimed before every run (e.g. the forward before a timed
// backward); `run` is on the clock. Median seconds of `runs` timed runs
// (at least one) after kWarmupRuns.
template <class Prepare, class Run>
double median_seconds(int runs, Prepare&& prepare, Run&& run) {
  std::vector<double> t;
  for (int i = 0; i < kWarmupRuns + std::max(1, runs); ++i) {
    prepare();
    const Clock::time_point t0 = Clock::now();
    run();
    if (i >= kWarmupRuns) t.push_back(seconds(t0, Clock::now()));
  }
  return median(std::move(t));
}

template <class Run>
double median_seconds(int runs, Run&& run) {
  return median_seconds(runs, [] {}, std::forward<Run>(run));
}

// median_seconds of the work `run` queues on `device`.
template <class Prepare, class Run>
double median_device_seconds(const c10::Device& device, int runs, Prepare&& prepare, Run&& run) {
  if (!device.is_cuda()) return median_seconds(runs, std::forward<Prepare>(prepare), std::forward<Run>(run));
  std::vector<double> t;
  for (int i = 0; i < kWarmupRuns + std::max(1, runs); ++i) {
    prepare();
    compat::EventClock clock(device, 0);
    run();
    clock.mark();
    if (i >= kWarmupRuns) t.push_back(clock.marks_s().back());
  }
  return median(std::move(t));
}

template <class Run>
double median_device_seconds(const c10::Device& device, int runs, Run&& run) {
  return median_device_seconds(device, runs, [] {}, std::forward<Run>(run));
}

}  // namespace ep::exec
