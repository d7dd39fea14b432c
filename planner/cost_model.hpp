// The planner's only source of time. The analytic model below derives every
// duration from the cluster spec; the simulator and a model fitted to a real
// run's profile implement the same interface.
#pragma once

#include <optional>
#include <string>

#include <vector>

#include "planner/config.hpp"
#include "planner/model_spec.hpp"
#include "planner/profile.hpp"

namespace ep {

enum class LinkKind { IntraNode, InterNode };
enum class CacheTier { HostMemory, Disk };

// The node's bandwidth for cache copies in `tier`, its GPUs' own links
// aside: host memory's; a disk copy streams through memory, so the disk
// tier's is the slower of the disk and memory.
[[nodiscard]] double node_cache_bandwidth(const HostSpec&, CacheTier);

class CostModel {
 public:
  virtual ~CostModel() = default;
  [[nodiscard]] virtual std::string name() const = 0;
  // `samples` is the micro-batch size. A sublayer's first forward in an
  // iteration (its stage's first micro-batch).
  [[nodiscard]] virtual double forward_s(const Sublayer&, int samples) const = 0;
  // The same sublayer's forward again in one iteration (a later
  // micro-batch, or a recompute): under bf16 autocast the first made the
  // weights' bf16 copies and the others reuse them (the executor drops
  // them after each iteration's step). Default: forward_s.
  [[nodiscard]] virtual double forward_again_s(const Sublayer& s, int samples) const { return forward_s(s, samples); }
  // Input and weight gradients, no recompute.
  [[nodiscard]] virtual double backward_s(const Sublayer&, int samples) const = 0;
  // The input's gradient alone (a layer frozen inside, decision 0037).
  // Default: backward_s by the sublayer's FLOP share of it (a profile does
  // not time it apart).
  [[nodiscard]] virtual double backward_input_s(const Sublayer& s, int samples) const {
    return s.bwd_flops_per_sample > 0 ? backward_s(s, samples) * s.bwd_input_flops_per_sample / s.bwd_flops_per_sample
                                      : 0.0;
  }
  // Forward under no_grad (F_frozen): no autograd bookkeeping.
  [[nodiscard]] virtual double frozen_forward_s(const Sublayer&, int samples) const = 0;
  [[nodiscard]] virtual double p2p_s(double bytes, LinkKind) const = 0;
  [[nodiscard]] virtual double allreduce_s(double bytes, int ranks, LinkKind slowest_link) const = 0;
  [[nodiscard]] virtual double cache_read_s(double bytes, CacheTier) const = 0;
  [[nodiscard]] virtual double cache_write_s(double bytes, CacheTier) const = 0;
  [[nodiscard]] virtual double optimizer_step_s(double params) const = 0;
  // The gradients' norms of `params` parameters, where a step computes them
  // (IterationSetup::grad_norms); measured only (0: a profile written
  // before it timed them inside optimizer_step_s).
  [[nodiscard]] virtual double grad_norms_s(double /*params*/) const { return 0; }
  // Transition terms a profile measured: the group rebuild sample nearest
  // to `ranks` (the transition scales it by the cluster's group formula),
  // packing and unpacking `bytes` of training state; nullopt: the cluster's
  // formulas stand alone (planner/transition.hpp).
  struct RebuildSample {
    int ranks = 0;
    double seconds = 0;
  };
  [[nodiscard]] virtual std::optional<RebuildSample> group_rebuild(int /*ranks*/) const { return std::nullopt; }
  [[nodiscard]] virtual std::optional<double> state_pack_s(double /*bytes*/) const { return std::nullopt; }
  // Creating a cache file of `bytes` in the tier, its blocks reserved
  // (fallocate): tmpfs zeroes every page (about 5.5 GB/s measured on an
  // H100's host), a disk reserves extents without writing them; nullopt:
  // not charged.
  [[nodiscard]] virtual std::optional<double> cache_create_s(double /*bytes*/, CacheTier) const { return std::nullopt; }
  // AutoCache's probe set up (its batch on the device, its file, its first
  // measurement's one-off work) for rows of `bytes` a batch; measured only.
  [[nodiscard]] virtual std::optional<double> cache_probe_setup_s(double /*bytes*/) const { return std::nullopt; }
  // A run's first iteration over its later ones (kernels loaded, library
  // handles made, allocators grown: the first epoch's one-off work);
  // measured only. nullopt: the cluster's context_creation_s and
  // warmup_iterations stand in.
  [[nodiscard]] virtual std::optional<double> first_iteration_s() const { return std::nullopt; }
  // A process creating its device context (its first touch of the device);
  // measured only. A woken process and the run's start pay it beside the
  // first iteration's extra, which a profile measures with it made.
  [[nodiscard]] virtual std::optional<double> device_context_s() const { return std::nullopt; }
  // The first iteration after a freeze step or a repartition over its later
  // ones; measured only. nullopt: cluster.transition.warmup_iterations.
  [[nodiscard]] virtual std::optional<double> freeze_warmup_s() const { return std::nullopt; }
  // AutoCache's probe timed whole once set up, at some depths (profile.hpp):
  // what predict_cache_probe_s scales its terms to; measured only.
  [[nodiscard]] virtual std::vector<CacheProbeSample> cache_probes() const { return {}; }
};

// compute   = sublayer_overhead_s + FLOPs / (peak_flops_per_s · efficiency),
//             one peak for FP32 and BF16 (DeviceSpec holds only the FP32
//             peak; BF16 runs at that rate here), frozen forward = forward;
//             input-only backward (a layer frozen inside) on its FLOPs;
// p2p       = latency + bytes / bandwidth;
// all-reduce (ring, n ranks) = 2(n−1)/n · bytes / bandwidth + 2(n−1) · latency, 0 for n = 1;
// cache     = bytes / min(host memory (disk tier: and disk) bandwidth, the
//             GPU's host link), reads and writes alike, one copy alone
//             (iteration_costs adds the node's copies sharing memory);
// optimizer = bytes touched / device memory bandwidth (memory-bound): weights
//             read and written, gradients read, optimizer state read and
//             written, all FP32;
// cache file = bytes / min(5.5 GB/s, host memory bandwidth) in the memory
//             tier (page zeroing, measured on an H100's host), 0 on disk.
class AnalyticCostModel final : public CostModel {
 public:
  AnalyticCostModel(const ClusterSpec&, const TrainingConfig&);

  [[nodiscard]] std::string name() const override { return "analytic"; }
  [[nodiscard]] double forward_s(const Sublayer&, int samples) const override;
  [[nodiscard]] double backward_s(const Sublayer&, int samples) const override;
  [[nodiscard]] double backward_input_s(const Sublayer&, int samples) const override;
  [[nodiscard]] double frozen_forward_s(const Sublayer&, int samples) const override;
  [[nodiscard]] double p2p_s(double bytes, LinkKind) const override;
  [[nodiscard]] double allreduce_s(double bytes, int ranks, LinkKind slowest_link) const override;
  [[nodiscard]] double cache_read_s(double bytes, CacheTier) const override;
  [[nodiscard]] std::optional<double> cache_create_s(double bytes, CacheTier) const override;
  [[nodiscard]] double cache_write_s(double bytes, CacheTier) const override;
  [[nodiscard]] double optimizer_step_s(double params) const override;

 private:
  [[nodiscard]] double compute_s(double flops) const;
  [[nodiscard]] const LinkSpec& link(LinkKind) const;
  [[nodiscard]] double cache_bandwidth(CacheTier) const;

  ClusterSpec cluster_;
  double optimizer_bytes_per_param_;
};

// Sums over the sublayers of a stage, for one micro-batch.
[[nodiscard]] double stage_forward_s(const CostModel&, const ModelSpec&, SublayerRange, int samples);
[[nodiscard]] double stage_forward_again_s(const CostModel&, const ModelSpec&, SublayerRange, int samples);
[[nodiscard]] double stage_backward_s(const CostModel&, const ModelSpec&, SublayerRange, int samples);
[[nodiscard]] double stage_frozen_forward_s(const CostModel&, const ModelSpec&, SublayerRange,
                                            int samples);

}  // namespace ep
