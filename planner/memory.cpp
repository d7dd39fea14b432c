#include "planner/memory.hpp"

#include <algorithm>

namespace ep {

namespace {

constexpr double kWeightBytesPerParam = 4;
constexpr double kGradientBytesPerParam = 4;

double optimizer_bytes_per_param(const TrainingConfig& t) {
  switch (t.optimizer) {
    case Optimizer::SGD: return t.momentum != 0 ? 4 : 0;
    case Optimizer::Adam:
    case Optimizer::AdamW: return 8;
  }
  return 0;
}

double saved_bytes_per_sample(const ModelSpec& spec, SublayerRange r) {
  double sum = 0;
  for (int i = r.first; i < r.last; ++i) sum += spec.sublayers[i].saved_activation_bytes_per_sample;
  return sum;
}

double active_activation_bytes(const ModelSpec& spec, Checkpointing mode, const StageLoad& s) {
  if (s.active.empty()) return 0;
  const double A = saved_bytes_per_sample(spec, s.active) * s.micro_batch_size;
  const double X = spec.input_bytes_per_sample_of(s.active.first) * s.micro_batch_size;
  switch (mode) {
    case Checkpointing::Never: return s.M * A;
    case Checkpointing::Always: return s.M * X + A;
    case Checkpointing::ExceptLast: return (s.M - 1) * X + (s.M > 1 ? 2 * A : A);
  }
  return 0;
}

double frozen_transient_bytes(const ModelSpec& spec, const StageLoad& s) {
  double largest = 0;
  for (int i = s.frozen.first; i < s.frozen.last; ++i)
    largest = std::max(largest, spec.sublayers[i].saved_activation_bytes_per_sample);
  return largest * s.micro_batch_size;
}

}  // namespace

bool recomputes(Checkpointing mode, int microbatch, int M) {
  return mode == Checkpointing::Always || (mode == Checkpointing::ExceptLast && microbatch < M - 1);
}

int recomputed_microbatches(Checkpointing mode, int M) {
  int n = 0;
  for (int m = 0; m < M; ++m) n += recomputes(mode, m, M) ? 1 : 0;
  return n;
}

std::ostream& operator<<(std::ostream& os, const MemoryBreakdown& m) {
  return os << "weights " << m.weights_bytes << " B, gradients " << m.gradients_bytes
            << " B, optimizer " << m.optimizer_bytes << " B, activations " << m.activations_bytes
            << " B, total " << m.total_bytes() << " B";
}

StageLoad stage_load(const ModelSpec& spec, const Partition& p, int stage, int micro_batch_size, int M) {
  return {p.active(stage), p.hosted_frozen(stage), micro_batch_size, M,
          spec.params(p.active(stage)) - trained_params(spec, p, stage)};
}

MemoryBreakdown stage_memory(const ModelSpec& spec, const TrainingConfig& training,
                             const StageLoad& stage) {
  const double active_params = spec.params(stage.active);
  const double frozen_params = spec.params(stage.frozen);
  const double trained_params = active_params - stage.frozen_inside_params;
  return {
      kWeightBytesPerParam * (active_params + frozen_params),
      kGradientBytesPerParam * trained_params,
      optimizer_bytes_per_param(training) * trained_params,
      active_activation_bytes(spec, training.checkpointing, stage) +
          frozen_transient_bytes(spec, stage),
  };
}

}  // namespace ep
