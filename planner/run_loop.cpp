#include "planner/run_loop.hpp"

#include <algorithm>
#include <string>

#include "planner/cache_policy.hpp"

namespace ep {

StepInputs RunBackend::follow(int step) {
  throw Error("run loop: freeze step " + std::to_string(step) + ": this back end decides its steps, it follows none");
}

bool probes_cache(const Config& c, int frozen_layers) {
  return frozen_layers > 0 && c.planner.autopipe && c.planner.cache == CachePolicyKind::Auto && cache_allowed(c);
}

namespace {

// Freeze step T's plan: decided here, or as the decider published it.
const Plan& plan_step(RunPlanner& planner, RunBackend& b, int T) {
  b.begin_step(T);
  StepInputs in;
  if (b.decides()) {
    in.frozen_layers = T == 0 ? 0 : planner.frozen_after(b.grad_norms());
    if (planner.probes(in.frozen_layers)) in.cache = b.probe_cache(in.frozen_layers);
  } else {
    in = b.follow(T);
  }
  if (in.cache) planner.measured_cache(in.frozen_layers, *in.cache);
  const Plan& plan = planner.next(in.frozen_layers);
  if (b.decides()) b.publish(T, in, plan);
  return plan;
}

}  // namespace

void run_training(RunPlanner& planner, RunBackend& b, int first_epoch) {
  // Copies: the planner's vector of plans grows (and moves) at every step.
  Plan current, previous;
  bool entered = false;
  int T = static_cast<int>(planner.run().plans.size());
  // The start, before the first epoch this process runs.
  bool started = false;
  const auto start = [&](int epoch) {
    if (started || epoch >= current.end_epoch) return;
    b.start(current, epoch);
    started = true;
  };
  if (T > 0) {  // resumed: the last plan continues, entered afresh
    current = planner.run().plans.back();
    b.enter(current, nullptr);
    entered = true;
  }
  while (true) {
    if (entered) {
      const int from = std::max(first_epoch, current.first_epoch);
      start(from);
      for (int e = from; e < current.end_epoch; ++e) b.run_epoch(current, e);
    }
    if (T > planner.freeze_steps()) break;
    const bool first = !entered;
    if (entered) previous = std::move(current);
    current = plan_step(planner, b, T++);
    b.enter(current, first ? nullptr : &previous);
    entered = true;
  }
}

namespace {

// Planning ahead: nothing measured, nothing run.
struct PlanAhead : RunBackend {
  std::vector<double> grad_norms() override { return {}; }
  std::optional<MeasuredCache> probe_cache(int) override { return std::nullopt; }
  void enter(const Plan&, const Plan*) override {}
  void run_epoch(const Plan&, int) override {}
};

}  // namespace

RunPlan plan_run(const Config& c, const CostModel& cost, const IterationPredictor& predictor) {
  RunPlanner planner(c, cost, predictor);
  PlanAhead ahead;
  run_training(planner, ahead);
  return planner.run();
}

}  // namespace ep
