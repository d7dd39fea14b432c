#include "exec/optimizer.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numbers>
#include <tuple>

#include "exec/torch_compat.hpp"
#include "planner/error.hpp"

namespace ep::exec {

void Optimizer::to(const std::string& name, const at::Device& device) {
  const auto it = state_.find(name);
  if (it == state_.end()) return;
  for (at::Tensor* t : {&it->second.momentum, &it->second.second_moment})
    if (t->defined()) *t = t->to(device);
}

at::Tensor grad_sq_norms(const std::vector<at::Tensor>& grads, const at::Device& device) {
  if (grads.empty()) return at::zeros({0}, at::TensorOptions().device(device).dtype(at::kDouble));
  return at::stack(at::_foreach_norm(grads)).to(at::kDouble).square();
}

void Optimizer::step(const std::vector<NamedTensor>& params, double lr) {
  c10::NoGradGuard no_grad;
  // One multi-tensor update per group of parameters on one device at one
  // step count (Adam's bias correction): a handful of kernels per stage,
  // not several per parameter.
  struct Group {
    std::vector<at::Tensor> params, grads, m, v;
    std::vector<at::Tensor> dir;                     // SGD: each parameter's update direction
    std::vector<at::Tensor> buf, buf_grad, buf_param;  // SGD: momentum buffers of earlier steps
    std::int64_t step = 0;
  };
  std::map<std::tuple<int, int, std::int64_t>, Group> groups;
  const bool sgd = t_.optimizer == ep::Optimizer::SGD;
  for (const auto& p : params) {
    const at::Tensor& grad = p.tensor.grad();
    if (!grad.defined()) continue;
    const auto it = state_.find(p.name);
    if (it == state_.end()) throw Error("optimizer: parameter '" + p.name + "' was never added");
    ParamState& s = it->second;
    ++s.step;
    const at::Device d = p.tensor.device();
    Group& g = groups[{static_cast<int>(d.type()), static_cast<int>(d.index()), sgd ? 0 : s.step}];
    g.step = s.step;
    g.params.push_back(p.tensor);
    g.grads.push_back(grad);
    if (sgd) {
      if (t_.momentum == 0) continue;
      if (!s.momentum.defined()) {  // the first buffer is the (decayed) gradient itself
        s.momentum = t_.weight_decay != 0 ? grad.add(p.tensor, t_.weight_decay) : grad.clone();
      } else {
        g.buf.push_back(s.momentum);
        g.buf_grad.push_back(grad);
        g.buf_param.push_back(p.tensor);
      }
      g.dir.push_back(s.momentum);
      continue;
    }
    if (!s.momentum.defined()) {
      s.momentum = at::zeros_like(p.tensor);
      s.second_moment = at::zeros_like(p.tensor);
    }
    g.m.push_back(s.momentum);
    g.v.push_back(s.second_moment);
  }
  for (auto& [key, g] : groups) {
    if (sgd) {
      if (t_.momentum == 0) {
        g.dir = t_.weight_decay != 0 ? at::_foreach_add(g.grads, g.params, t_.weight_decay) : g.grads;
      } else if (!g.buf.empty()) {  // buf = momentum * buf + (decayed) gradient
        if (t_.weight_decay != 0) g.buf_grad = at::_foreach_add(g.buf_grad, g.buf_param, t_.weight_decay);
        at::_foreach_mul_(g.buf, t_.momentum);
        at::_foreach_add_(g.buf, g.buf_grad);
      }
      at::_foreach_add_(g.params, g.dir, -lr);
      continue;
    }
    compat::adam_step(g.params, g.grads, g.m, g.v, g.step, lr, t_.weight_decay, t_.optimizer == ep::Optimizer::AdamW);
  }
}

void Optimizer::make_state(const std::vector<NamedTensor>& params) {
  if (t_.optimizer == ep::Optimizer::SGD) return;
  c10::NoGradGuard no_grad;
  for (const auto& p : params) {
    const auto it = state_.find(p.name);
    if (it == state_.end()) throw Error("optimizer: parameter '" + p.name + "' was never added");
    ParamState& s = it->second;
    if (s.momentum.defined()) continue;
    s.momentum = at::zeros_like(p.tensor);
    s.second_moment = at::zeros_like(p.tensor);
  }
}

void Optimizer::warm_up(const at::TensorOptions& like, bool grad_norms) const {
  Optimizer scratch(t_);
  scratch.add("scratch");
  // Two steps: SGD's momentum takes its other path from the second on.
  const at::Tensor w = at::zeros({64}, like).requires_grad_(true);
  w.mutable_grad() = at::zeros({64}, like);
  for (int i = 0; i < 2; ++i) {
    if (grad_norms) (void)grad_sq_norms({w.grad()}, w.device());
    scratch.step({{"scratch", w}}, t_.lr);
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
