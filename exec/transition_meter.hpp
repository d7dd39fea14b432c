// One freeze step's transition, measured as it happens and assembled in one
// place into the row it records (TransitionCost, transitions.json's object;
// traces/run_outputs.hpp): the step's clock from begin(), AutoCache's probe
// inside the planning, the move's parts as enter_plan times them, then,
// over the new plan's first iterations, its first batch and its warm-up.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "exec/measure.hpp"
#include "exec/progress.hpp"
#include "exec/timing.hpp"
#include "planner/run_plan.hpp"
#include "traces/run_outputs.hpp"

namespace ep::exec {

class TransitionMeter {
 public:
  // `rows`: the run state's (trace::RunState::transitions), which a move is
  // recorded into and its first batch and warm-up then complete.
  explicit TransitionMeter(std::vector<trace::TransitionCost>& rows) : rows_(rows) {}

  // A freeze step's planning begins; `pinned`: the pinned blocks made so
  // far, on a GPU where the build counts them.
  void begin(std::optional<PinnedAllocs> pinned);
  // AutoCache's probe, inside the planning: its seconds, of them its
  // set-up's, and its measure()s' parts.
  void probed(double seconds, double setup_s, const CacheProbe::Parts& parts);
  // The planning ended: the run loop enters the plan.
  void planned();
  // The move's parts (state transfer, repartition, group rebuild), which
  // enter_plan times into the row as it carries them out.
  [[nodiscard]] trace::TransitionCost& move() { return row_; }
  // The node's cache file, in the repartition: its seconds here, and how
  // long it had taken where it was made ahead (0: made here).
  void cache_file(double seconds, double made_ahead_s);
  // The move from `previous` to `plan` ended at `epoch`. Whether it moved
  // anything (frozen count or K): only such a move is recorded, and its
  // first batch and warm-up measured. Either way the step's seconds
  // (planning included) go to the epoch after it (take_seconds).
  bool moved(const Plan& previous, const Plan& plan, int epoch);
  [[nodiscard]] Clock::time_point step_start() const { return step_start_; }
  [[nodiscard]] Clock::time_point move_end() const { return move_end_; }
  // "frozen 0->1 K 4->2 replicas 1->2", of the move recorded last.
  [[nodiscard]] std::string what() const;
  // Its log line: the seconds and every part.
  [[nodiscard]] std::string line() const;
  // The last step's seconds, for the epoch after it; then 0.
  [[nodiscard]] double take_seconds();

  // The new plan's first batch (once after a move): assembled ahead or
  // not, and the host's wait for it.
  void first_batch(bool prefetched, double wait_s);
  [[nodiscard]] bool warming() const { return warmup_.on(); }
  // One of the new plan's first iterations (WarmupMeter::add).
  void warmup_iteration(double launch_s, double done_s, bool epoch_done);

 private:
  std::vector<trace::TransitionCost>& rows_;
  trace::TransitionCost row_;
  Clock::time_point step_start_ = Clock::now(), move_end_ = step_start_;
  std::optional<PinnedAllocs> pinned_at_start_;
  double probe_setup_s_ = 0;
  CacheProbe::Parts probe_parts_;
  double cache_file_s_ = 0, cache_ahead_s_ = 0;
  double seconds_ = 0;  // the last step's, not yet taken
  bool first_batch_pending_ = false;
  WarmupMeter warmup_;
};

}  // namespace ep::exec
