// Freeze policies (SPEC §2): how many bottom layers are frozen after each
// freeze step T. Layers freeze bottom-up only (a frozen prefix), and at
// least `min_active_layers` stay active.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "planner/config.hpp"

namespace ep {

// The geometric bound of Eq. 1 on real numbers, before rounding:
// f + alpha (L - f).
[[nodiscard]] double alpha_bound_real(int L, double frozen_before, double alpha);
// Its closed form after T steps from 0: L (1 - (1 - alpha)^T).
[[nodiscard]] double alpha_bound_closed_form(int L, int T, double alpha);
// The bound as a layer count: rounded as configured, capped at L - min_active.
[[nodiscard]] int alpha_bound(int L, int frozen_before, double alpha, FreezeRounding rounding,
                              int min_active);

class FreezePolicy {
 public:
  virtual ~FreezePolicy() = default;
  [[nodiscard]] virtual std::string name() const = 0;
  // Whether next() needs per-layer gradient norms; a planner without them
  // (planning ahead, simulating) says so and plans with the alpha bound.
  [[nodiscard]] virtual bool needs_grad_norms() const { return false; }
  // Frozen count after freeze step T >= 1. `grad_norms[l]` is layer l's
  // gradient norm aggregated over the interval since the last step (the
  // executor uses the mean over iterations); empty when not available.
  // At least frozen_before, at most L - min_active_layers.
  [[nodiscard]] virtual int next(int T, int frozen_before,
                                 std::span<const double> grad_norms) const = 0;
};

// Recorded per-layer gradient norms, one row per freeze step.
struct GradNormTrace {
  std::vector<std::vector<double>> steps;  // steps[T-1][layer]
};
// CSV with header `step,layer,grad_norm`, steps numbered from 1, every layer
// of every step present once. Errors name file:line.
[[nodiscard]] GradNormTrace load_grad_norm_trace(const std::string& path, int L);
// Writes what load_grad_norm_trace reads (the executor records a real run's
// norms; the simulator replays them). Throws ep::Error on I/O failure.
void write_grad_norm_trace(const GradNormTrace& trace, const std::string& path);

// Whether a run computes its gradients' norms: where its freeze policy
// reads them as it trains (the gradient-norm policy on measured norms, not
// on a replayed trace). Elsewhere the optimizer step skips them (on an H200
// they were 0.52 ms of ViT-B/16's 0.83 ms step) and grad_norms.csv has no
// rows; the divergence check then reads the loss, and the weights before
// a checkpoint or weights.bin.
[[nodiscard]] bool reads_grad_norms(const Config& config);

// The policies a config may name (planner.freeze_policy): none, alpha,
// gradient_norm and replay are built in; a new one is registered under its
// name before any config naming it is read (the config reader checks the
// name against this list). Replay of a gradient-norm trace is the
// gradient-norm policy fed from the trace.
using FreezePolicyFactory = std::function<std::unique_ptr<FreezePolicy>(const Config&)>;
// Throws ep::Error for a name that is taken or not lower_snake_case.
void register_freeze_policy(const std::string& name, FreezePolicyFactory make);
[[nodiscard]] std::vector<std::string> freeze_policy_names();
[[nodiscard]] std::unique_ptr<FreezePolicy> make_freeze_policy(const Config& config);

// The alpha bound alone: a pure schedule.
[[nodiscard]] std::unique_ptr<FreezePolicy> make_alpha_policy(int L, const PlannerConfig& p);
// Eq. 1: min(alpha bound, the converged layer). Taking layer j* =
// argmin over active layers of ||g_j|| as converged freezes layers 0..j*,
// i.e. j* + 1 layers.
[[nodiscard]] std::unique_ptr<FreezePolicy> make_gradient_norm_policy(int L, const PlannerConfig& p);

// Each freeze step's frozen count: the policy, fed with a replayed
// gradient-norm trace when the config names one (past its end nothing more
// freezes), else with the norms a back end measured, else (planning ahead
// without norms) the alpha bound alone, which used_alpha_bound() reports.
class FreezeDecider {
 public:
  explicit FreezeDecider(const Config&);
  // Throws ep::Error where the policy answers outside [frozen_before,
  // L - min_active_layers].
  [[nodiscard]] int next(int T, int frozen_before, std::span<const double> measured);
  // What a later step T is expected to allow, ahead of its measurements: the
  // policy without norms (a replayed trace, else the alpha bound, an upper
  // bound on what measured norms allow).
  [[nodiscard]] int projected(int T, int frozen_before) const;
  [[nodiscard]] bool used_alpha_bound() const { return used_alpha_bound_; }

 private:
  [[nodiscard]] int checked(int T, int frozen_before, int frozen) const;

  int L_;
  PlannerConfig p_;
  std::unique_ptr<FreezePolicy> policy_;
  GradNormTrace trace_;
  bool used_alpha_bound_ = false;
};

// The frozen count for every freeze step T = 1..steps, from the policy; a
// policy that needs gradient norms reads them from `trace` when given,
// else falls back to the alpha bound and reports it via `used_alpha_bound`.
struct FreezeTimeline {
  std::vector<int> frozen;  // frozen[T] for T = 0..steps; frozen[0] = 0
  bool used_alpha_bound = false;
};
[[nodiscard]] FreezeTimeline freeze_timeline(const Config& config, int steps);

}  // namespace ep
