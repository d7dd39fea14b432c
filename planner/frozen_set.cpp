// Which layers a per-layer freeze policy freezes when it plans ahead
// without gradient norms (decision 0037): the policy gives the count, the
// planner weighs two ways to fill it by predicted time to the end of
// training (a rollout, below). The lowest trainable layers
// (PipeTransformer's order) grow the prefix, which repacks, replicates and
// caches; the layers of the stages that bound the pipeline shorten the
// slowest stage where nothing moves.
#include <algorithm>
#include <limits>

#include "planner/run_plan.hpp"

namespace ep {

namespace {

bool has(const std::vector<int>& sorted, int x) { return std::binary_search(sorted.begin(), sorted.end(), x); }

// `before` and the lowest layers not in it, `count` in all.
std::vector<int> lowest_layers(const std::vector<int>& before, int count, int L) {
  std::vector<int> out = before;
  for (int l = 0; l < L && static_cast<int>(out.size()) < count; ++l)
    if (!has(before, l)) out.push_back(l);
  std::sort(out.begin(), out.end());
  return out;
}

// `before` and, one at a time, the lowest trainable layer of the stage of
// `in_force` with the most compute per micro-batch (a frozen layer there
// counted at its input-only backward), `count` in all.
std::vector<int> bounding_stage_layers(const PlanContext& ctx, const Plan& in_force, const std::vector<int>& before,
                                       int count) {
  const ModelSpec& spec = ctx.spec;
  const Partition& p = in_force.partition;
  const int b = std::max(1, (in_force.batch + in_force.M - 1) / std::max(1, in_force.M));
  std::vector<int> out = before;
  const auto frozen = [&](int layer) { return std::find(out.begin(), out.end(), layer) != out.end(); };
  const auto stage_s = [&](int s) {
    double t = 0;
    for (int i = p.active(s).first; i < p.active(s).last; ++i) {
      const Sublayer& sub = spec.sublayers[i];
      const bool inside = sub.kind == SublayerKind::Attention || sub.kind == SublayerKind::Mlp ? frozen(sub.layer) : false;
      t += ctx.cost.forward_s(sub, b) + (inside ? ctx.cost.backward_input_s(sub, b) : ctx.cost.backward_s(sub, b));
    }
    return t;
  };
  const auto lowest_trainable = [&](int s) {
    for (int i = p.active(s).first; i < p.active(s).last; ++i) {
      const Sublayer& sub = spec.sublayers[i];
      if ((sub.kind == SublayerKind::Attention || sub.kind == SublayerKind::Mlp) && !frozen(sub.layer)) return sub.layer;
    }
    return -1;
  };
  while (static_cast<int>(out.size()) < count) {
    int stage = -1;
    double slowest = -1;
    for (int s = 0; s < p.K(); ++s)
      if (lowest_trainable(s) >= 0 && stage_s(s) > slowest) slowest = stage_s(s), stage = s;
    if (stage < 0) {  // no stage has a trainable layer left: the lowest anywhere
      std::sort(out.begin(), out.end());
      return lowest_layers(out, count, spec.num_layers());
    }
    out.push_back(lowest_trainable(stage));
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

// A set is valued by a rollout: its step, then each later step's projected
// count filled by the lowest trainable layers (the base policy the choice
// improves on), every plan the best the planner's timeline finds after the
// one before, so that a set which leaves holes below pays for them later.
double RunPlanner::rollout_s(int T, FrozenSet set) const {
  const int L = ctx_.config.model.num_hidden_layers;
  double total = 0;
  Plan previous;
  After at = after();
  for (int t = T; t <= steps_; ++t) {
    if (t > T) {
      const FrozenSet grown = frozen_set_of(lowest_layers(set.layers(), freeze_.projected(t, set.count()), L));
      if (grown == set) {  // nothing more freezes (the bound saturated): the plan runs on to the end
        const int epochs = ctx_.config.training.epochs - step_base(t, set.prefix).first_epoch;
        total += static_cast<double>(previous.iterations_per_epoch) * epochs * previous.iteration_s;
        break;
      }
      set = grown;
    }
    Plan base = step_base(t, set.prefix);
    base.frozen_inside_allowed = set.inside;
    const std::vector<Candidate> cands = weigh(base, at);
    const auto fit = std::find_if(cands.begin(), cands.end(), [](const Candidate& c) { return c.plan.fits_memory; });
    if (fit == cands.end()) return std::numeric_limits<double>::infinity();
    const Plan& p = fit->plan;
    const double fill = p.cache_fill_from >= 0 ? p.fill_iteration_s - p.iteration_s : 0.0;
    total += p.predicted_transition_s +
             static_cast<double>(p.iterations_per_epoch) * (p.epochs() * p.iteration_s + fill);
    previous = p;
    at = After{&previous, previous.cache.on ? previous.frozen_layers : at.cached_layers};
  }
  return total;
}

FrozenSet RunPlanner::choose_frozen_set(int T, const std::vector<int>& before, int count, std::string& reason) const {
  const int L = ctx_.config.model.num_hidden_layers;
  const FrozenSet lowest = frozen_set_of(lowest_layers(before, count, L));
  const FrozenSet bounding = frozen_set_of(bounding_stage_layers(ctx_, run_.plans.back(), before, count));
  if (bounding == lowest) return lowest;
  const double by_lowest = rollout_s(T, lowest), by_bounding = rollout_s(T, bounding);
  const bool bounds = by_bounding < by_lowest;
  const FrozenSet& chosen = bounds ? bounding : lowest;
  reason = "layers " + layer_list(chosen.layers()) + (bounds ? " (on the slowest stages)" : " (the lowest)") + ": " +
           seconds_text(bounds ? by_bounding : by_lowest) + " to the end, against " +
           seconds_text(bounds ? by_lowest : by_bounding) + " with layers " +
           layer_list((bounds ? lowest : bounding).layers()) + " (later steps filled from the lowest layer)";
  return chosen;
}

}  // namespace ep
