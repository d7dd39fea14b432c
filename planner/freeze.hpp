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
  // Whether the policy freezes layers anywhere, not only a prefix (decision
  // 0037): next() then counts every frozen layer, and which() names them.
  [[nodiscard]] virtual bool per_layer() const { return false; }
  // A per-layer policy's frozen layers after step T (sorted): `before` and
  // more, `count` in all (next()'s answer), chosen on the gradient norms.
  [[nodiscard]] virtual std::vector<int> which(int /*T*/, const std::vector<int>& before, int /*count*/,
                                               std::span<const double> /*grad_norms*/) const {
    return before;
  }
};

// What a freeze step allows: `count` layers frozen in all, the earlier
// ones among them; `layers` says which (sorted), or, where a per-layer
// policy plans ahead without gradient norms (`open`), holds only the
// earlier ones, and the planner chooses the rest by predicted time.
struct FreezeAllowance {
  int count = 0;
  std::vector<int> layers;
  bool open = false;
};

// A set of frozen layers as the plans carry it: its run from layer 0 is the
// prefix (with the stem: cacheable, repacked away), the rest freeze inside.
struct FrozenSet {
  int prefix = 0;
  std::vector<int> inside;  // sorted, each > prefix
  [[nodiscard]] int count() const { return prefix + static_cast<int>(inside.size()); }
  [[nodiscard]] std::vector<int> layers() const;
  friend bool operator==(const FrozenSet&, const FrozenSet&) = default;
};
// `layers` sorted and distinct.
[[nodiscard]] FrozenSet frozen_set_of(const std::vector<int>& layers);
// "4 frozen", "4 frozen + layers 7 9 inside".
[[nodiscard]] std::string describe(const FrozenSet&);

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
// Per layer (gradient_norm_per_layer): the alpha bound on the count of
// frozen layers, and the trainable layers of least gradient norm fill it,
// wherever they sit; planning ahead without norms, any may (the planner
// chooses by time).
[[nodiscard]] std::unique_ptr<FreezePolicy> make_per_layer_policy(int L, const PlannerConfig& p);

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
  // The step's frozen layers: next()'s count over `before`, and which
  // layers (a prefix policy: the first ones; a per-layer policy: its
  // which(), open where it has no norms). Throws ep::Error where a policy's
  // layers are not `before` and more, sorted, within the count's bounds.
  [[nodiscard]] FreezeAllowance next_set(int T, const std::vector<int>& before, std::span<const double> measured);
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
