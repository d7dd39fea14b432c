// SGD (momentum), Adam and AdamW with their state keyed by parameter name,
// not by tensor identity: a parameter keeps its state when a repartition
// moves it to another stage or device, leaves the optimizer when its layer
// freezes, and is checkpointed and sent to a new replica by name.
// The update equations are torch.optim's (tests/exec checks them against
// torch::optim), with betas (0.9, 0.999) and eps 1e-8.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "exec/model.hpp"
#include "planner/config.hpp"

namespace ep::exec {

struct ParamState {
  std::int64_t step = 0;
  at::Tensor momentum;     // SGD momentum buffer, or Adam's exp_avg
  at::Tensor second_moment;  // Adam's exp_avg_sq
};

class Optimizer {
 public:
  explicit Optimizer(const TrainingConfig& training) : t_(training) {}

  // State is created on first use; adding an existing name keeps its state.
  void add(const std::string& name) { state_.try_emplace(name); }
  void remove(const std::string& name) { state_.erase(name); }
  [[nodiscard]] bool contains(const std::string& name) const { return state_.count(name) > 0; }
  [[nodiscard]] std::size_t size() const { return state_.size(); }
  [[nodiscard]] const std::map<std::string, ParamState>& state() const { return state_; }
  // Adds `name` or replaces its state: restoring a checkpoint or a peer's
  // state (state.hpp).
  void set_state(const std::string& name, ParamState s) { state_[name] = std::move(s); }
  // Moves the state tensors of `name` with its parameter.
  void to(const std::string& name, const at::Device& device);

  // One update of `params` (all added before) with learning rate `lr`.
  // Parameters without a gradient are skipped. Different stages may step
  // disjoint parameter sets concurrently: the map is not modified here.
  void step(const std::vector<NamedTensor>& params, double lr);

  // The state the first step of `params` (all added before) would make,
  // made now where it is not yet: Adam's zero moments (SGD's first momentum
  // buffer is that step's gradient: nothing to make). A run's start makes
  // it, so the first epoch's first step allocates nothing; the updates are
  // those of a state the step made.
  void make_state(const std::vector<NamedTensor>& params);
  // This optimizer's update, with the gradients' norms where `grad_norms`,
  // run once on scratch parameters like `like` (device, dtype), this
  // optimizer's state untouched: the step's kernels loaded in a run's start.
  void warm_up(const at::TensorOptions& like, bool grad_norms) const;

 private:
  TrainingConfig t_;
  std::map<std::string, ParamState> state_;
};

// ‖g‖² of each of `grads` (on `device`), as doubles: one multi-tensor norm,
// a few kernels, not several per tensor. Every optimizer step action runs
// it before the update (the freeze policy's per-layer norms are summed
// from it), so the profile times the two together.
[[nodiscard]] at::Tensor grad_sq_norms(const std::vector<at::Tensor>& grads, const at::Device& device);

// Learning rate at optimizer step `step` (0-based) of `total_steps`: linear
// warm-up over training.warmup_steps, then constant, cosine or linear decay
// to 0 at total_steps.
[[nodiscard]] double learning_rate(const TrainingConfig& training, std::int64_t step, std::int64_t total_steps);

}  // namespace ep::exec
