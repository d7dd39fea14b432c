// AutoPipe beyond the partitioner (SPEC §3): compression by Eq. 2 and the
// chunk search over M, both driven by a CostModel and a memory measure.
// What the back ends implement (IterationSetup, IterationCosts,
// IterationPredictor) is in iteration.hpp.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "planner/cost_model.hpp"
#include "planner/memory.hpp"
#include "planner/iteration.hpp"
#include "planner/partition.hpp"
#include "planner/schedule.hpp"

namespace ep {

// Partition of a plan, honouring the AutoPipe switch: with AutoPipe the
// frozen prefix leaves the pipeline and the rest is repartitioned; without
// it the initial partition stays and frozen sublayers stay where they were.
[[nodiscard]] Partition plan_partition(const PlanContext&, int frozen_layers, int stages,
                                       bool cache_on);

// Where the time objective runs the frozen prefix: as F_frozen on stage 0's
// device, outside the pipeline (AutoPipe's m_partition; needed by the
// cache), or inside the pipeline's stages, each frozen sublayer forward-only
// on the stage that holds it (the frozen forward is then pipelined across
// devices instead of serialised on one).
enum class FrozenPlacement { Device0, InStages };
[[nodiscard]] std::string to_string(FrozenPlacement);

// The time objective's partition: exact min-max over predicted stage time
// for micro-batches of `micro_batch` samples. An active unit costs its
// forward and backward (with checkpointing, its forward without autograd
// and again with it in the backward), a frozen one its no_grad forward; with FrozenPlacement::Device0
// stage 0 also carries F_frozen's forward or, with the cache on, the read.
[[nodiscard]] Partition partition_by_time(const PlanContext&, int frozen_layers, int stages, bool cache_on,
                                          CacheTier tier, int micro_batch, FrozenPlacement);

// Eq. 2's measure. "paper": the largest stage load in millions of
// parameters, stage 0 counting lambda_frozen * S_frozen for F_frozen.
[[nodiscard]] std::vector<double> stage_loads_paper(const ModelSpec&, const Partition&,
                                                   double lambda_frozen);
[[nodiscard]] double m_gpu_paper(const ModelSpec&, const Partition&, double lambda_frozen);
// "memory": the largest device memory in bytes (weights, gradients,
// optimizer state, activations; F_frozen's weights on stage 0) with M
// micro-batches of a per-pipeline `batch`; a device holds stages d, d+K,
// ... of the partition.
[[nodiscard]] double max_device_memory(const ModelSpec&, const TrainingConfig&, const Partition&,
                                       int K, int M, int batch);

struct CompressionAttempt {
  int from_K = 0;
  int to_K = 0;
  double m_gpu = 0;  // of the K/2 pipeline, in the compression's measure
  double limit = 0;  // paper: M_GPU^(0); memory: device memory
  bool accepted = false;
  std::string reason;  // when decided by something other than the measure
  friend bool operator==(const CompressionAttempt&, const CompressionAttempt&) = default;
};

struct CompressionResult {
  int K = 0;
  std::vector<CompressionAttempt> attempts;
};

// The compression's reference: paper mode M_GPU^(0), the largest stage of the
// initial unfrozen pipeline of K0 stages; memory mode the device's memory.
[[nodiscard]] double compression_limit(const PlanContext&);
// From the current K, halve while the shorter pipeline still fits (paper:
// M_GPU < M_GPU^(0); memory: fits the device for the largest M the chunk
// range allows). Also halves when fewer sublayer units than K * v remain.
[[nodiscard]] CompressionResult compress(const PlanContext&, int frozen_layers, int K, bool cache_on);

struct ChunkCandidate {
  int M = 0;
  double iteration_s = 0;  // 0 when infeasible
  double bubble_fraction = 0;
  double memory_bytes = 0;  // largest stage
  bool feasible = true;     // fits the device memory
  friend bool operator==(const ChunkCandidate&, const ChunkCandidate&) = default;
};

struct ChunkChoice {
  int M = 0;
  double iteration_s = 0;
  std::vector<ChunkCandidate> table;  // every M tried, ascending
};

// Chooses M in [M_min_factor*K, M_max_factor*K] (capped at the batch) that
// minimises the predicted iteration time among the M that fit the device.
// Memoised per (K, batch), like the paper's profiler that runs once per K:
// the first plan with a given K decides its M. Throws ep::Error when no M
// fits.
class ChunkSearch {
 public:
  ChunkSearch(const PlanContext& ctx, IterationPredictor predict)
      : ctx_(ctx), predict_(std::move(predict)) {}
  // `only`: the candidates to ask the predictor about (the time objective's
  // shortlist from the planner's own timeline); empty: the whole range.
  const ChunkChoice& choose(const IterationSetup& setup, const std::vector<int>& only = {});

 private:
  const PlanContext& ctx_;
  IterationPredictor predict_;
  std::map<std::pair<int, int>, ChunkChoice> memo_;
};

}  // namespace ep
