// A cost model fitted to a profile measured on the real executor
// (profile.hpp), so that the planner and the simulator predict the machine
// they will run on. Every term is linear in two coefficients, t = a·f_a + c·f_c,
// fitted by least squares (Eigen):
//
//   compute, per (sublayer kind, op)  t = a + c·b        b = micro-batch size
//       a fixed per-call overhead (launch, dispatch) plus work proportional
//       to the micro-batch: at a fixed sequence length a sublayer's FLOPs
//       are linear in b. The fit holds for the profiled model shape only
//       (the samples carry a kind, not FLOPs), and for its precision.
//       Predictions interpolate the measured sizes (per size the median
//       sample) and carry on past the largest with the fit's slope c: a
//       GPU's time is flat until the micro-batch fills it, then linear, and
//       no one line meets both ends (seen on an H200: the line fitted to
//       b = 1..128 was 17% short of the measured b = 128). The fit is
//       reported for its residuals, which say how far from linear it is.
//   p2p                               t = a + c·bytes    a latency, 1/c bandwidth
//   all-reduce (ring, n ranks)        t = a·2(n−1) + c·2(n−1)/n·bytes, 0 for n = 1
//       a = per-step latency α, c = seconds per byte β, the same form as
//       AnalyticCostModel; samples with n = 1 carry no information on α, β
//       and are left out.
//   cache, per (tier, read|write)     t = a + c·bytes
//   optimizer step                    t = a + c·params
//   gradients' norms                  t = a + c·params (without samples: 0,
//                                     a profile that timed them in the step)
//
// The profile's transfers carry no link kind (a profiling host has one kind
// of link), so one p2p fit and one all-reduce fit stand for every LinkKind.
//
// Least squares on relative residuals, (t_fit − t)/t: timing noise is
// multiplicative and the samples span decades of bytes, so plain residuals
// would let the largest samples alone decide the latency. Coefficients are
// non-negative: when the unconstrained solution has a negative one, the fit
// is redone with it fixed at 0 (for two unknowns that is exact non-negative
// least squares), and the fit says so (`clamped`).
//
// Compute needs samples for every kind and op (stem, attention, mlp, head ×
// forward, backward, frozen_forward); the construction names the missing
// ones. forward_again (a later micro-batch's forward, measured under bf16)
// is fitted alike when the profile has it for any kind, and then needed for
// every kind; without it forward stands in. backward_input (the input's
// gradient alone: a layer frozen inside, decision 0037) is fitted alike
// for attention and mlp when the profile has it, and then needed for both;
// without it the backward by its FLOP share stands in (CostModel's
// default). p2p, all-reduce, each cache
// (tier, op) and the optimizer are optional: without samples, those terms
// come from `fallback` (e.g. the AnalyticCostModel of the configured
// cluster). A fit whose samples cannot
// separate its two coefficients (e.g. one micro-batch size only) is refused.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "planner/cost_model.hpp"
#include "planner/profile.hpp"

namespace ep {

enum class ComputeOp { Forward, Backward, FrozenForward, ForwardAgain, BackwardInput };
enum class CacheOp { Read, Write };

// One fitted term, t = a·f_a + c·f_c (the features per term as above).
struct LinearFit {
  std::string name;  // "compute attention/forward", "p2p", "allreduce", "cache host/read", "optimizer"
  std::string form;  // e.g. "a + c*samples"
  double a = 0;
  double c = 0;
  int samples = 0;          // samples used
  double r2 = 0;            // coefficient of determination, on seconds
  double rms_rel_residual = 0;  // sqrt(mean(((t_fit − t)/t)²))
  double max_rel_residual = 0;  // max |t_fit − t|/t
  bool clamped = false;     // a coefficient was fixed at 0 (see above)
};

struct FittedCoefficients {
  // [SublayerKind][ComputeOp]; ForwardAgain's only when `forward_again`,
  // BackwardInput's only attention's and mlp's when `backward_input`.
  std::array<std::array<LinearFit, 5>, 4> compute;
  bool forward_again = false;   // the profile measured it (bf16): else forward stands in
  bool backward_input = false;  // the profile measured it: else the backward by its FLOP share
  std::optional<LinearFit> p2p;        // nullopt: the fallback's
  std::optional<LinearFit> allreduce;
  std::array<std::array<std::optional<LinearFit>, 2>, 2> cache;  // [CacheTier][CacheOp]
  std::optional<LinearFit> optimizer;
  std::optional<LinearFit> grad_norms;

  [[nodiscard]] const LinearFit& compute_fit(SublayerKind k, ComputeOp op) const {
    return compute[static_cast<int>(k)][static_cast<int>(op)];
  }
  [[nodiscard]] const std::optional<LinearFit>& cache_fit(CacheTier t, CacheOp op) const {
    return cache[static_cast<int>(t)][static_cast<int>(op)];
  }
};

class FittedCostModel final : public CostModel {
 public:
  // `fallback` must outlive this model (held by reference).
  FittedCostModel(const Profile&, const CostModel& fallback);
  FittedCostModel(const Profile&, const CostModel&&) = delete;  // would dangle

  [[nodiscard]] std::string name() const override { return "fitted"; }
  [[nodiscard]] double forward_s(const Sublayer&, int samples) const override;
  [[nodiscard]] double forward_again_s(const Sublayer&, int samples) const override;
  [[nodiscard]] double backward_s(const Sublayer&, int samples) const override;
  [[nodiscard]] double backward_input_s(const Sublayer&, int samples) const override;
  [[nodiscard]] double frozen_forward_s(const Sublayer&, int samples) const override;
  [[nodiscard]] double p2p_s(double bytes, LinkKind) const override;
  [[nodiscard]] double allreduce_s(double bytes, int ranks, LinkKind slowest_link) const override;
  [[nodiscard]] double cache_read_s(double bytes, CacheTier) const override;
  [[nodiscard]] double cache_write_s(double bytes, CacheTier) const override;
  [[nodiscard]] double optimizer_step_s(double params) const override;
  [[nodiscard]] double grad_norms_s(double params) const override;
  // The measured sample with the nearest rank count (group rebuild), or
  // scaled by bytes from the nearest measured size (state pack + unpack,
  // a cache file's creation).
  [[nodiscard]] std::optional<RebuildSample> group_rebuild(int ranks) const override;
  [[nodiscard]] std::optional<double> state_pack_s(double bytes) const override;
  [[nodiscard]] std::optional<double> cache_create_s(double bytes, CacheTier) const override;
  [[nodiscard]] std::optional<double> cache_probe_setup_s(double bytes) const override;
  // The mean of the profile's first-iteration samples.
  [[nodiscard]] std::optional<double> first_iteration_s() const override;
  [[nodiscard]] std::optional<double> device_context_s() const override;
  [[nodiscard]] std::optional<double> freeze_warmup_s() const override;
  [[nodiscard]] std::vector<CacheProbeSample> cache_probes() const override { return cache_probes_; }

  [[nodiscard]] const FittedCoefficients& coefficients() const { return fits_; }
  [[nodiscard]] const CostModel& fallback() const { return fallback_; }
  // Multi-line table for reports: every term, its form, coefficients, the
  // number of samples, R², RMS and max relative residual, or the fallback
  // that stands in; then the measured transitions.
  [[nodiscard]] std::string describe() const;
  // What a user of this model must know, one line each: the terms no
  // sample times (the fallback's), and the fits whose samples their form
  // explains worse than kTrustedRmsRelResidual (rms relative residual).
  static constexpr double kTrustedRmsRelResidual = 0.25;
  [[nodiscard]] std::vector<std::string> cautions() const;

 private:
  [[nodiscard]] double compute_s(const Sublayer&, ComputeOp, int samples) const;
  [[nodiscard]] std::optional<double> per_byte(const std::string& what, double bytes) const;
  [[nodiscard]] std::optional<double> mean_of(std::string_view what) const;

  const CostModel& fallback_;
  FittedCoefficients fits_;
  // Per (kind, op): (micro-batch size, median seconds), by size.
  std::array<std::array<std::vector<std::pair<int, double>>, 5>, 4> compute_points_;
  std::string environment_;
  std::string model_;
  std::vector<TransitionSample> transitions_;
  std::vector<CacheProbeSample> cache_probes_;
};

}  // namespace ep
