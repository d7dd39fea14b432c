// Memory of one pipeline stage (SPEC §3, compression = "memory"): weights,
// gradients, optimizer state and activations, in bytes, per device.
#pragma once

#include <ostream>

#include "planner/config.hpp"
#include "planner/model_spec.hpp"
#include "planner/partition.hpp"

namespace ep {

struct MemoryBreakdown {
  double weights_bytes = 0;
  double gradients_bytes = 0;
  double optimizer_bytes = 0;
  double activations_bytes = 0;

  [[nodiscard]] double total_bytes() const {
    return weights_bytes + gradients_bytes + optimizer_bytes + activations_bytes;
  }
};

std::ostream& operator<<(std::ostream&, const MemoryBreakdown&);

// What one device of a pipeline holds.
struct StageLoad {
  SublayerRange active;  // trained sublayers of this stage
  SublayerRange frozen;  // frozen sublayers hosted here (F_frozen, first stage only); may be empty
  int micro_batch_size = 1;
  int M = 1;  // micro-batches per mini-batch
  // Of the active sublayers' parameters, those of layers frozen inside
  // (decision 0037): weights and activations, no gradients or optimizer state.
  double frozen_inside_params = 0;
};
// Stage `stage` of `p`: its active sublayers, the frozen ones its device
// hosts, and the parameters of its layers frozen inside.
[[nodiscard]] StageLoad stage_load(const ModelSpec&, const Partition& p, int stage, int micro_batch_size, int M);

// Parameters: FP32 weights (4 B/param, also under BF16 autocast) for active
// and frozen sublayers; for active ones only, FP32 gradients (4 B/param) and
// optimizer state (SGD: 4 B/param momentum buffer when momentum ≠ 0;
// Adam/AdamW: 8 B/param, two moments).
//
// Activations, per torch Pipe's `checkpoint` (torchgpipe), with A = one
// micro-batch's saved activations of the active sublayers and X = one
// micro-batch's stage input:
//   Never      M·A  (every micro-batch keeps everything until its backward)
//   Always     M·X + A  (only inputs are kept; one micro-batch is recomputed
//                        at a time)
//   ExceptLast (M−1)·X + A + A  (the last micro-batch is not checkpointed;
//                        counted as alive while the recompute of the next
//                        runs, since torchgpipe starts a recompute ahead of
//                        the backward that consumes it; with M = 1 there is
//                        no recompute: A)
// Frozen sublayers run under no_grad: they add, besides their weights, a
// transient working set for one micro-batch, bounded by the largest saved
// activations any of them would keep if active.
// Not counted: activation gradients in flight, the CUDA context, allocator
// fragmentation, autocast's cached BF16 weight copies.
// Whether micro-batch m of M reruns its stage's forward in its backward:
// Always every one, ExceptLast all but m = M-1, Never none. Every stage
// alike. The one rule for the cost model (iteration_costs), the memory model
// above and the executor (exec/pipeline.cpp).
[[nodiscard]] bool recomputes(Checkpointing, int microbatch, int M);
[[nodiscard]] int recomputed_microbatches(Checkpointing, int M);

[[nodiscard]] MemoryBreakdown stage_memory(const ModelSpec&, const TrainingConfig&,
                                           const StageLoad&);

}  // namespace ep
