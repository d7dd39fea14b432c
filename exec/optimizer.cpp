#include "exec/optimizer.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "planner/error.hpp"

namespace ep::exec {

void Optimizer::to(const std::string& name, const at::Device& device) {
  const auto it = state_.find(name);
  if (it == state_.end()) return;
  for (at::Tensor* t : {&it->second.momentum, &it->second.second_moment})
    if (t->defined()) *t = t->to(device);
}

void Optimizer::step(const std::vector<NamedTensor>& params, double lr) {
  constexpr double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  c10::NoGradGuard no_grad;
  for (const auto& p : params) {
    const at::Tensor& grad_ref = p.tensor.grad();
    if (!grad_ref.defined()) continue;
    const auto it = state_.find(p.name);
    if (it == state_.end()) throw Error("optimizer: parameter '" + p.name + "' was never added");
    ParamState& s = it->second;
    at::Tensor param = p.tensor;
    at::Tensor grad = grad_ref;
    ++s.step;
    if (t_.optimizer == ep::Optimizer::SGD) {
      if (t_.weight_decay != 0) grad = grad.add(param, t_.weight_decay);
      if (t_.momentum != 0) {
        if (!s.momentum.defined()) s.momentum = grad.clone();
        else s.momentum.mul_(t_.momentum).add_(grad);
        grad = s.momentum;
      }
      param.add_(grad, -lr);
      continue;
    }
    if (t_.optimizer == ep::Optimizer::AdamW) param.mul_(1 - lr * t_.weight_decay);
    else if (t_.weight_decay != 0) grad = grad.add(param, t_.weight_decay);
    if (!s.momentum.defined()) {
      s.momentum = at::zeros_like(param);
      s.second_moment = at::zeros_like(param);
    }
    s.momentum.lerp_(grad, 1 - beta1);
    s.second_moment.mul_(beta2).addcmul_(grad, grad, 1 - beta2);
    const double bias1 = 1 - std::pow(beta1, static_cast<double>(s.step));
    const double bias2 = 1 - std::pow(beta2, static_cast<double>(s.step));
    const at::Tensor denom = (s.second_moment.sqrt() / std::sqrt(bias2)).add_(eps);
    param.addcdiv_(s.momentum, denom, -lr / bias1);
  }
}

double learning_rate(const TrainingConfig& t, std::int64_t step, std::int64_t total_steps) {
  if (t.warmup_steps > 0 && step < t.warmup_steps)
    return t.lr * static_cast<double>(step + 1) / t.warmup_steps;
  const double span = std::max<std::int64_t>(1, total_steps - t.warmup_steps);
  const double progress = std::clamp(static_cast<double>(step - t.warmup_steps) / span, 0.0, 1.0);
  switch (t.lr_schedule) {
    case LrSchedule::Constant: return t.lr;
    case LrSchedule::Cosine: return t.lr * 0.5 * (1 + std::cos(std::numbers::pi * progress));
    case LrSchedule::Linear: return t.lr * (1 - progress);
  }
  return t.lr;
}

}  // namespace ep::exec
