// The one way the executor times what a plan or a profile needs (chunk
// candidates, the cache probe, the profiler's figures, `validate`'s
// replicas): one warm-up run, then the median of `runs` timed runs. On a
// GPU the time is the device's, by events around the run (its queue empty
// before, or for compute kept busy), not the host's, which only enqueues
// the work.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
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

// One run of `run` on the clock: the host's, or on a GPU the device's
// events around the work it queues (the queue emptied first).
template <class Run>
double seconds_of(const c10::Device& device, Run&& run) {
  if (!device.is_cuda()) {
    const Clock::time_point t0 = Clock::now();
    run();
    return seconds(t0, Clock::now());
  }
  const compat::DeviceMarks::Anchor empty = compat::DeviceMarks::renew(device, {});  // the queue emptied
  compat::DeviceMarks marks(device, empty);
  run();
  marks.mark();
  return std::chrono::duration<double>(marks.times().back() - empty.host).count();
}

// Timings that know when they cannot be trusted (`profile`): while a
// SettledTimings lives on a thread, each median taken there takes more
// timed runs, up to kMaxRunsFactor x `runs`, until their interquartile
// range is within kSettledSpread of the median, and the medians that never
// settle are counted. Per thread: ranks timed as threads (a collective)
// must take the same number of runs.
inline constexpr double kSettledSpread = 0.10;
inline constexpr int kMaxRunsFactor = 4;
struct TimingSpread {
  int medians = 0, unsettled = 0;
  double worst = 0;  // the largest spread left (IQR / median)
};
inline thread_local TimingSpread* settling = nullptr;
class SettledTimings {
 public:
  SettledTimings() { settling = &spread_; }
  ~SettledTimings() { settling = nullptr; }
  SettledTimings(const SettledTimings&) = delete;
  SettledTimings& operator=(const SettledTimings&) = delete;
  [[nodiscard]] const TimingSpread& spread() const { return spread_; }

 private:
  TimingSpread spread_;
};

// (q3 - q1) / median of `t` (linear interpolation between order statistics).
inline double relative_spread(std::vector<double> t) {
  if (t.size() < 2) return 0;
  std::sort(t.begin(), t.end());
  const auto q = [&](double f) {
    const double x = f * static_cast<double>(t.size() - 1);
    const auto i = static_cast<std::size_t>(x);
    return i + 1 < t.size() ? t[i] + (x - static_cast<double>(i)) * (t[i + 1] - t[i]) : t[i];
  };
  const double mid = q(0.5);
  return mid > 0 ? (q(0.75) - q(0.25)) / mid : 0;
}

// `prepare` untimed, then `timed()` (its seconds), kWarmupRuns + `runs`
// times (at least one timed), more while settling (above): the median of
// the timed ones.
template <class Prepare, class Timed>
double median_of_runs(int runs, Prepare&& prepare, Timed&& timed) {
  std::vector<double> t;
  for (int i = 0; i < kWarmupRuns + std::max(1, runs); ++i) {
    prepare();
    const double s = timed();
    if (i >= kWarmupRuns) t.push_back(s);
  }
  if (TimingSpread* s = settling) {
    const auto cap = static_cast<std::size_t>(kMaxRunsFactor * std::max(1, runs));
    double spread = relative_spread(t);
    while (spread > kSettledSpread && t.size() < cap) {
      prepare();
      t.push_back(timed());
      spread = relative_spread(t);
    }
    ++s->medians;
    if (spread > kSettledSpread) ++s->unsettled;
    s->worst = std::max(s->worst, spread);
  }
  return median(std::move(t));
}

// The median of a figure that `timed` recorded once per run beside its
// seconds, its warm-up runs left out as median_of_runs leaves them out.
inline double median_after_warmup(std::vector<double> per_run) {
  per_run.erase(per_run.begin(), per_run.begin() + kWarmupRuns);
  return median(std::move(per_run));
}

// `prepare` runs untimed before every run (e.g. the forward before a timed
// backward); `run` is on `device`'s clock. Median seconds of `runs` timed
// runs (at least one) after kWarmupRuns.
template <class Prepare, class Run>
double median_device_seconds(const c10::Device& device, int runs, Prepare&& prepare, Run&& run) {
  return median_of_runs(runs, prepare, [&] { return seconds_of(device, run); });
}

template <class Run>
double median_device_seconds(const c10::Device& device, int runs, Run&& run) {
  return median_device_seconds(device, runs, [] {}, std::forward<Run>(run));
}

// Compute (and a cache read, the host's copy then the device's) as a
// training iteration runs it: on a GPU the host queues each
// kernel while earlier ones run, so none waits for its launch, and a
// device timed from an empty queue counts the launches of a short run (at
// micro-batches of 32 on an H200, iterations predicted from sublayers
// timed that way came out 1.5x the measured ones). Here a spin kernel
// holds the stream while the host queues `run` (1.5x the host's previous
// queuing time), and events around `run` time its kernels alone. A run
// the host queues more slowly than the device runs it takes the host's
// time: the slower of the two (so `run` must not wait for the device, or
// its wait for the spin is counted). On the CPU, as median_device_seconds.
// median_compute_times gives that figure with its parts, the medians of
// the host's queuing time and of the device's (all three equal on the CPU).
struct ComputeTimes {
  double seconds = 0, host_s = 0, device_s = 0;
};
template <class Prepare, class Run>
ComputeTimes median_compute_times(const c10::Device& device, int runs, Prepare&& prepare, Run&& run) {
  if (!device.is_cuda()) {
    const double s = median_device_seconds(device, runs, prepare, run);
    return {s, s, s};
  }
  constexpr double kMaxHold_s = 0.1, kMinHold_s = 1e-4;
  std::vector<double> hosts, devices;  // per run, warm-up included
  const double s = median_of_runs(runs, prepare, [&] {
    const double last_host_s = hosts.empty() ? 0 : hosts.back();
    const compat::QueuedTime q = compat::queued_seconds(device, std::min(kMaxHold_s, 1.5 * last_host_s + kMinHold_s), run);
    hosts.push_back(q.host_s);
    devices.push_back(q.device_s);
    return std::max(q.device_s, q.host_s);
  });
  return {s, median_after_warmup(std::move(hosts)), median_after_warmup(std::move(devices))};
}

template <class Prepare, class Run>
double median_compute_seconds(const c10::Device& device, int runs, Prepare&& prepare, Run&& run) {
  return median_compute_times(device, runs, std::forward<Prepare>(prepare), std::forward<Run>(run)).seconds;
}

template <class Run>
double median_compute_seconds(const c10::Device& device, int runs, Run&& run) {
  return median_compute_seconds(device, runs, [] {}, std::forward<Run>(run));
}

// On the host's clock (CPU work, or host-side waits such as a collective's).
template <class Prepare, class Run>
double median_seconds(int runs, Prepare&& prepare, Run&& run) {
  return median_device_seconds(c10::Device(c10::kCPU), runs, std::forward<Prepare>(prepare), std::forward<Run>(run));
}

template <class Run>
double median_seconds(int runs, Run&& run) {
  return median_seconds(runs, [] {}, std::forward<Run>(run));
}

}  // namespace ep::exec
