#include "planner/run_loop.hpp"

#include <algorithm>
#include <string>

#include "planner/cache_policy.hpp"
#include "planner/transition.hpp"

namespace ep {

StepInputs RunBackend::follow(int step) {
  throw Error("run loop: freeze step " + std::to_string(step) + ": this back end decides its steps, it follows none");
}

bool probes_cache(const Config& c, int frozen_layers) {
  return frozen_layers > 0 && c.planner.autopipe && c.planner.cache == CachePolicyKind::Auto && cache_allowed(c);
}

namespace {

// A step's plan from its inputs, as every process plans it.
const Plan& plan_from(RunPlanner& planner, const StepInputs& in) {
  if (in.cache) planner.measured_cache(in.frozen_layers, *in.cache);
  return planner.next(in.frozen_layers, in.frozen_inside, in.frozen_set_reason);
}

// Freeze step T's inputs and plan: decided here, or as the decider published them.
std::pair<StepInputs, const Plan*> plan_step(RunPlanner& planner, RunBackend& b, int T) {
  b.begin_step(T);
  StepInputs in;
  if (b.decides()) {
    if (T > 0) {
      const FrozenSet allowed = planner.frozen_after(b.grad_norms(), &in.frozen_set_reason);
      in.frozen_layers = allowed.prefix;
      in.frozen_inside = allowed.inside;
    }
    if (planner.probes(in.frozen_layers)) in.cache = b.probe_cache(in.frozen_layers);
  } else {
    in = b.follow(T);
  }
  const Plan& plan = plan_from(planner, in);
  if (b.decides()) b.publish(T, in, plan);
  return {in, &plan};
}

// Planning ahead: nothing measured, nothing run.
struct PlanAhead : RunBackend {
  std::vector<double> grad_norms() override { return {}; }
  std::optional<MeasuredCache> probe_cache(int) override { return std::nullopt; }
  void enter(const Plan&, const Plan*) override {}
  void run_epoch(const Plan&, int) override {}
};

}  // namespace

RunRecord run_training(RunPlanner& planner, RunBackend& b, int first_epoch) {
  RunRecord record;
  // Copies: the planner's vector of plans grows (and moves) at every step.
  Plan current, previous;
  int T = static_cast<int>(planner.run().plans.size());
  bool started = false;
  // The plan entered, its epochs run from `from` on (the start before the first).
  const auto carry_out = [&](StepRecord& step, int from) {
    step.plan = current.id;
    b.enter(current, step.previous < 0 ? nullptr : &previous);
    from = std::max(from, current.first_epoch);
    if (!started && from < current.end_epoch) {
      step.start_epoch = from;
      step.start = start_program(planner.context(), current, from);
      b.start(current, step.start, from);
      started = true;
    }
    for (int e = from; e < current.end_epoch; ++e) {
      b.run_epoch(current, e);
      step.epochs.push_back(e);
    }
  };
  if (T > 0) {  // resumed: the last plan continues, entered afresh
    current = planner.run().plans.back();
    StepRecord& step = record.steps.emplace_back();
    step.step = current.freeze_step;
    step.inputs.frozen_layers = current.frozen_allowed;
    step.inputs.frozen_inside = current.frozen_inside_allowed;
    carry_out(step, first_epoch);
  }
  for (; T <= planner.freeze_steps(); ++T) {
    const bool first = record.steps.empty();
    if (!first) previous = std::move(current);
    StepRecord& step = record.steps.emplace_back();
    step.step = T;
    const auto [in, plan] = plan_step(planner, b, T);
    step.inputs = in;
    current = *plan;
    step.previous = first ? -1 : previous.id;
    carry_out(step, first_epoch);
  }
  return record;
}

RunRecord walk_ahead(RunPlanner& planner) {
  PlanAhead ahead;
  return run_training(planner, ahead);
}

void replay_steps(RunPlanner& planner, const std::vector<StepInputs>& steps) {
  for (const StepInputs& in : steps) (void)plan_from(planner, in);
}

RunPlan plan_run(const Config& c, const CostModel& cost, const IterationPredictor& predictor) {
  RunPlanner planner(c, cost, predictor);
  (void)walk_ahead(planner);
  return std::move(planner).take();
}

}  // namespace ep
