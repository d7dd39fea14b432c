// What a run does, in the figures a user compares runs by: whether it fits,
// its global batch and updates (the same training or not), the memory of
// its fullest device and how much of the cluster's peak it uses. One
// computation for the simulator's modes, the executor's run and `plan`.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/run_plan.hpp"

namespace ep {

struct RunFigures {
  bool fits_memory = true;
  double peak_memory_bytes = 0;
  std::int64_t updates = 0;           // optimizer steps, every epoch of every plan
  std::int64_t global_batch_min = 0;  // samples per update (all replicas), over the plans
  std::int64_t global_batch_max = 0;
  double flops = 0;  // the model FLOPs the run executes (frozen forward where it runs, recomputation excluded)
};

// Samples per update of a plan: its replicas' batches together.
[[nodiscard]] std::int64_t global_batch(const Plan&);
// FLOPs one sample costs in `epoch` of the plan: the frozen prefix's forward
// unless the cache reads it, forward and backward of every trained sublayer
// (activation recomputation is not counted: it is not the model's work).
[[nodiscard]] double flops_per_sample(const ModelSpec&, const Plan&, int epoch);
// The same with the cache read (`reads`) or not.
[[nodiscard]] double flops_per_sample(const ModelSpec&, const Plan&, bool reads);
[[nodiscard]] RunFigures run_figures(const ModelSpec&, const std::vector<Plan>&);
// Executed FLOP/s over `peak_flops_per_s`, the peak of every device of the
// cluster together (idle ones included): what the run makes of what it holds.
[[nodiscard]] double utilisation(double flops, double seconds, double peak_flops_per_s);
// One plan's steady iteration: its FLOPs over iteration_s, against that peak.
[[nodiscard]] double plan_utilisation(const ModelSpec&, const Plan&, double peak_flops_per_s);

}  // namespace ep
