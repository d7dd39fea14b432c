#include "exec/transition_meter.hpp"

#include "planner/transition.hpp"

#include <cstdio>
#include <utility>

namespace ep::exec {

void TransitionMeter::begin(std::optional<PinnedAllocs> pinned) {
  row_ = {};
  step_start_ = Clock::now();
  pinned_at_start_ = pinned;
  probe_setup_s_ = 0;
  probe_parts_ = {};
}

void TransitionMeter::probed(double seconds, double setup_s, const CacheProbe::Parts& parts) {
  row_.cache_probe_s += seconds;
  probe_setup_s_ += setup_s;
  probe_parts_ += parts;
}

void TransitionMeter::planned() {
  row_.planning_s = exec::seconds(step_start_, Clock::now()) - row_.cache_probe_s;
  cache_file_s_ = cache_ahead_s_ = 0;  // set where the repartition creates or takes the node's file
}

void TransitionMeter::cache_file(double seconds, double made_ahead_s) {
  cache_file_s_ = seconds;
  cache_ahead_s_ = made_ahead_s;
}

bool TransitionMeter::moved(const Plan& previous, const Plan& plan, int epoch) {
  row_.epoch = epoch;
  row_.frozen_before = previous.frozen_layers;
  row_.frozen_after = plan.frozen_layers;
  row_.K_before = previous.K;
  row_.K_after = plan.K;
  row_.replicas_before = previous.layout.replicas;
  row_.replicas_after = plan.layout.replicas;
  move_end_ = Clock::now();
  seconds_ = exec::seconds(step_start_, move_end_);
  if (!refrozen(previous, plan) && plan.K == previous.K) return false;
  rows_.push_back(row_);
  warmup_.start();
  first_batch_pending_ = true;
  return true;
}

std::string TransitionMeter::what() const {
  const trace::TransitionCost& t = rows_.back();
  return "frozen " + std::to_string(t.frozen_before) + "->" + std::to_string(t.frozen_after) + " K " +
         std::to_string(t.K_before) + "->" + std::to_string(t.K_after) + " replicas " +
         std::to_string(t.replicas_before) + "->" + std::to_string(t.replicas_after);
}

std::string TransitionMeter::line() const {
  const trace::TransitionCost& t = rows_.back();
  char probe[128] = "";
  if (t.cache_probe_s > 0)
    std::snprintf(probe, sizeof probe, " [set-up %.3f, frozen forward %.3f, rows written %.3f, reads %.3f]",
                  probe_setup_s_, probe_parts_.forward_s, probe_parts_.write_s, probe_parts_.read_s);
  char file[80] = "";
  if (cache_ahead_s_ > 0)
    std::snprintf(file, sizeof file, " [cache file %.3f, made ahead in %.3f]", cache_file_s_, cache_ahead_s_);
  else if (cache_file_s_ > 0)
    std::snprintf(file, sizeof file, " [cache file %.3f]", cache_file_s_);
  // The probe's and the cache's first pinned blocks are made in the step,
  // not in the epoch after (its host line counts its own).
  const std::optional<PinnedAllocs> pinned = pinned_allocs_since(pinned_at_start_);
  char buf[480];
  std::snprintf(buf, sizeof buf,
                "transition %s (%.3f s: cache probe %.3f%s, planning %.3f, state transfer %.3f, group rebuild %.3f, "
                "repartition %.3f%s%s%s)",
                what().c_str(), seconds_, t.cache_probe_s, probe, t.planning_s, t.state_transfer_s, t.rebuild_s,
                t.repartition_s, file, pinned ? "; " : "", pinned ? format_pinned(*pinned).c_str() : "");
  return buf;
}

double TransitionMeter::take_seconds() { return std::exchange(seconds_, 0.0); }

void TransitionMeter::first_batch(bool prefetched, double wait_s) {
  if (!std::exchange(first_batch_pending_, false)) return;
  rows_.back().first_batch_prefetched = prefetched;
  rows_.back().first_batch_wait_s = wait_s;
}

void TransitionMeter::warmup_iteration(double launch_s, double done_s, bool epoch_done) {
  warmup_.add(launch_s, done_s, epoch_done, rows_.back().warmup_s);
}

}  // namespace ep::exec
