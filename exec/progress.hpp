// What a running training measures and reports: the traced iterations'
// bubble, compute and all-reduce time, a plan's warm-up after a
// transition, a finished epoch's metrics row and its log line.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "exec/cache.hpp"
#include "exec/pipeline.hpp"
#include "planner/run_plan.hpp"
#include "traces/run_outputs.hpp"

namespace ep::exec {

// Per-iteration measures from traced actions: compute time per device, the
// bubble (1 - compute time / (K * makespan), Timeline's definition: the
// share of the devices' time computing nothing) and all-reduce time per
// device (the union of its bucket spans: they overlap each other).
struct TracedMeasures {
  double compute_s = 0, bubble = 0, comm_s = 0;
  int iterations = 0;
  void add(const IterationResult& r, int K);
};

// A new plan's warm-up: its first iteration minus the median of the next
// five (fewer when the epoch ends first). Each iteration runs from when the
// device could start it (its launch began, and the one before was done) to
// when the device was done with it: times of the device's, not of when the
// host read the results. The host reads an iteration after it has queued
// the next, so its reading times put part of the second iteration into
// the first (a whole one on the CPU, where queuing is running).
class WarmupMeter {
 public:
  void start() { times_.clear(), last_done_s_.reset(), on_ = true; }
  [[nodiscard]] bool on() const { return on_; }
  // The next iteration, launched at `launch_s` and done at `done_s` (one
  // clock). Returns true, with `warmup_s` set, once it has seen enough.
  bool add(double launch_s, double done_s, bool epoch_done, double& warmup_s);

 private:
  std::vector<double> times_;
  std::optional<double> last_done_s_;
  bool on_ = false;
};

// Blocks of pinned host memory the process has made (torch's caching host
// allocator: cudaHostAlloc when no cached block fits, on the thread that
// asked) and the host's time making them. A batch, a cache read or a cache
// write bound for a GPU takes one; a new block is paid once, by the thread
// that asked, at a cost that grows with its size. nullopt where the build
// cannot count them (CPU builds, LibTorch before 2.8).
struct PinnedAllocs {
  std::int64_t blocks = 0;
  double alloc_s = 0;
  double bytes = 0;  // the blocks' sizes (each a request rounded up to a power of two)
};
[[nodiscard]] std::optional<PinnedAllocs> pinned_allocs_now();
// What was made since `before` (nullopt where it was not counted).
[[nodiscard]] std::optional<PinnedAllocs> pinned_allocs_since(const std::optional<PinnedAllocs>& before);
// "pinned memory: N new blocks (B MB), X ms making them"
[[nodiscard]] std::string format_pinned(const PinnedAllocs&);

// The host's side of an epoch: how long it took to queue each iteration
// (its batch taken, every action queued), when it had each one's results,
// and the activation cache's host work. Where queuing takes as long as the
// interval between results, the host paces the epoch, not the device;
// the simulator models the device and the cache's copies, not the host.
struct HostPace {
  std::vector<double> queue_s;  // per iteration
  std::vector<double> done_s;   // per iteration, from the epoch's start
  ActivationCache::HostTimes cache;  // the epoch's part (end())
  std::optional<PinnedAllocs> pinned;  // the epoch's part, on a GPU where the build counts them
  // At the epoch's start: what `cache` (null: none) has counted so far and,
  // on a GPU (`gpu`), the pinned blocks made so far.
  void begin(const ActivationCache* cache, bool gpu);
  // At its end: `cache` and `pinned` set to what the epoch added.
  void end(const ActivationCache* cache);
  // `now` minus `before`: a cache's host times over an interval.
  static ActivationCache::HostTimes since(const ActivationCache::HostTimes& before,
                                         const ActivationCache::HostTimes& now);

 private:
  ActivationCache::HostTimes cache_at_start_;
  std::optional<PinnedAllocs> pinned_at_start_;
};

// One log line: medians per iteration, the first iteration's wait, the
// cache's copies, waits and its flush per epoch.
[[nodiscard]] std::string format_host_pace(const HostPace&);

// The metrics row of the epoch `state` has just finished under `plan`
// (`state` still holds its totals).
[[nodiscard]] trace::EpochMetrics epoch_metrics(const Plan& plan, const trace::RunState& state,
                                                const TracedMeasures& traced, double epoch_s, double transition_s,
                                                bool cache_filled, double accuracy);

}  // namespace ep::exec
