// Objective "time" acts on a freeze step with the later steps in view. A
// plan kept "from here on" misjudges what comes next: the policy will
// allow more layers frozen, each act costs a transition and, with the
// cache, a fill epoch. So a candidate is valued as its step's epochs plus
// the least predicted time from the next step to the end, where every
// later step may act on the policy's projected count (FreezeDecider::
// projected) or keep the plan in force: an exact minimum over those
// choices, by dynamic programming over (run of steps at one projected
// count, the run last acted on).
// Each act is the best plan the planner's timeline finds at that depth
// (K no longer than the plan in force), priced from the plan it follows.
#include <algorithm>
#include <limits>

#include "planner/run_plan.hpp"
#include "planner/transition.hpp"

namespace ep {

namespace {

// The epochs step T covers.
std::pair<int, int> step_epochs(const Config& c, int T) {
  const int interval = c.planner.freeze_interval_epochs;
  return {T * interval, std::min(c.training.epochs, (T + 1) * interval)};
}

// The seconds `p` trains step T's epochs, its first one filling or
// advancing the cache where `p` does (a plan kept through the step does not).
double epochs_s(const Config& c, const Plan& p, int T, bool fills) {
  const auto [first, end] = step_epochs(c, T);
  const double fill = fills && p.cache_fill_from >= 0 ? p.fill_iteration_s - p.iteration_s : 0.0;
  return static_cast<double>(p.iterations_per_epoch) * ((end - first) * p.iteration_s + fill);
}

}  // namespace

std::vector<RunPlanner::Candidate>& RunPlanner::menu_at(int T, int allowed) {
  // Weighed once per decision (every finalist's lookahead shares it) after
  // the run's plan in force, best first: follow_on prices each from the
  // plan it actually follows.
  const int now = static_cast<int>(run_.plans.size());
  if (menu_step_ != now) {
    menus_.clear();
    menu_step_ = now;
  }
  const auto key = std::make_pair(T, allowed);
  auto it = menus_.find(key);
  if (it == menus_.end()) {
    std::vector<Candidate> cands;
    try {
      cands = weigh(step_base(T, allowed), after());
    } catch (const Error&) {  // no chunk range fits any K at this depth: nothing to act on
    }
    it = menus_.emplace(key, std::move(cands)).first;
  }
  return it->second;
}

// The later plans are timed by the same back end as the step's finalists:
// mixed with the planner's timeline, a lookahead would weigh a confirmed
// plan against guesses (at 1,024 GPUs the two disagreed by a third on an
// all-reduce of 256 replicas). The back end answers each program once.
std::optional<Plan> RunPlanner::act_at(int T, int allowed, int max_K) {
  std::vector<Candidate>& menu = menu_at(T, allowed);
  const auto best = std::find_if(menu.begin(), menu.end(), [&](const Candidate& c) { return c.plan.K <= max_K; });
  if (best == menu.end()) return std::nullopt;
  if (!best->timed) *best = confirmed(menu, {static_cast<std::size_t>(best - menu.begin())}).front();
  return best->plan;
}

double RunPlanner::value_s(const Plan& p) {
  const int cached = p.cache.on ? p.frozen_layers : cached_layers_;
  return p.predicted_transition_s + epochs_s(ctx_.config, p, p.freeze_step, true) + future_s(p, cached);
}

Plan RunPlanner::follow_on(const Plan& like, int T, int allowed, const After& after) const {
  Plan base = step_base(T, allowed);
  base.frozen_layers = like.frozen_layers;
  Plan p = shape(base, after, like.K, like.partition, like.cache);
  p.M = like.M;
  p.iteration_s = like.iteration_s;
  p.bubble_fraction = like.bubble_fraction;
  p.samples_per_s = like.samples_per_s;
  p.max_device_memory_bytes = like.max_device_memory_bytes;
  p.fits_memory = like.fits_memory;
  p.recomputed_microbatches = like.recomputed_microbatches;
  p.fill_iteration_s = 0;
  if (p.cache_fill_from >= 0)
    p.fill_iteration_s = p.cache_fill_from == like.cache_fill_from && like.fill_iteration_s > 0
                             ? like.fill_iteration_s
                             : predict_iteration(ctx_, iteration_setup(ctx_.config, p, true)).makespan;
  p.predicted_transition_s = predict_transition(ctx_, after.previous, p).total_s();
  return p;
}

double RunPlanner::future_s(const Plan& in_force, int cached_layers) {
  const Config& c = ctx_.config;
  const int first = in_force.freeze_step + 1;
  if (first > steps_) return 0;
  // The later steps in runs of one projected count: acting at a run's first
  // step is never worse than acting later in it (the same plan, the same
  // transition, more epochs at it), so the choices are per run, at most one
  // per depth the policy reaches (the alpha bound saturates), whatever the
  // number of steps.
  struct Run {
    int first_step = 0, end_step = 0, allowed = 0;
    Plan act;  // the best the timeline finds there, no longer than the plan in force (K never grows)
  };
  std::vector<Run> runs;
  // A per-layer policy's later steps are projected as prefixes of its
  // count: the later layers are not known before their gradient norms.
  int a = in_force.allowed_set().count();
  for (int T = first; T <= steps_; ++T) {
    a = freeze_.projected(T, a);
    if (!runs.empty() && runs.back().allowed == a) {
      runs.back().end_step = T + 1;
      continue;
    }
    Run r{T, T + 1, a, {}};
    const std::optional<Plan> act = act_at(T, a, in_force.K);
    r.act = act ? *act : in_force;
    if (!act) r.act.fits_memory = false;  // none: the run can only keep (never taken over a plan that fits)
    runs.push_back(std::move(r));
  }
  const int n = static_cast<int>(runs.size());
  // The seconds plan p trains a run's epochs, its first filling the cache where p does.
  const auto run_s = [&](const Plan& p, const Run& r, bool fills) {
    const int interval = c.planner.freeze_interval_epochs;
    const int epochs = std::min(c.training.epochs, r.end_step * interval) - r.first_step * interval;
    const double fill = fills && p.cache_fill_from >= 0 ? p.fill_iteration_s - p.iteration_s : 0.0;
    return static_cast<double>(p.iterations_per_epoch) * (epochs * p.iteration_s + fill);
  };
  // The plan in force entering run k: index 0 the given one, index i >= 1
  // the act of run i - 1.
  const auto in_force_at = [&](int i) -> const Plan& { return i == 0 ? in_force : runs[i - 1].act; };
  const auto cached_after = [&](int i) { return in_force_at(i).cache.on ? in_force_at(i).frozen_layers : cached_layers; };
  // next[i]: the least time from the run being folded to the end with plan i in force.
  std::vector<double> next(static_cast<std::size_t>(n) + 1, 0.0), here(next.size(), 0.0);
  for (int k = n - 1; k >= 0; --k) {
    const Run& r = runs[k];
    for (int i = 0; i <= k; ++i) {
      const Plan& x = in_force_at(i);
      const double keep = run_s(x, r, false) + next[i];
      const Plan y = follow_on(r.act, r.first_step, r.allowed, After{&x, cached_after(i)});
      const double move = y.fits_memory || !x.fits_memory ? y.predicted_transition_s + run_s(y, r, true) + next[k + 1]
                                                          : std::numeric_limits<double>::infinity();
      here[i] = std::min(keep, move);
    }
    std::swap(here, next);
  }
  return next[0];
}

}  // namespace ep
