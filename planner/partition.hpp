// AutoPipe's partitioning (SPEC §3): m_partition splits the model into the
// frozen prefix F_frozen and the active sublayer list F_pipe; a partitioner
// cuts F_pipe into K contiguous stages. Boundaries sit only between
// sublayers (each sublayer is one residual block, so no skip connection is
// ever cut); the stem is glued to the first active sublayer, the head to
// the last, so they always travel with the first and last stage.
#pragma once

#include <algorithm>
#include <iosfwd>
#include <span>
#include <string>
#include <vector>

#include "planner/config.hpp"
#include "planner/model_spec.hpp"

namespace ep {

struct MPartition {
  int frozen_layers = 0;
  int frozen_end = 0;       // F_frozen = sublayers [0, frozen_end); 0 when nothing is frozen
  std::vector<SublayerRange> units;  // F_pipe, as units no boundary may split
};

// Frozen layers 0..frozen_layers-1 (and the stem with them) leave the pipeline.
[[nodiscard]] MPartition m_partition(const ModelSpec& spec, int frozen_layers);

// Stage k holds sublayers [bounds[k], bounds[k+1]).
struct Partition {
  int frozen_layers = 0;
  int frozen_end = 0;
  std::vector<int> bounds;  // size K+1; bounds.front() == frozen_end, bounds.back() == #sublayers
  // Layers frozen behind a trainable one (decision 0037), sorted, each past
  // the prefix: they stay in their stage's active range and run its forward
  // and their input's gradient, but have no weight gradient, optimizer
  // state or all-reduce. Empty: prefix freezing.
  std::vector<int> frozen_inside;

  [[nodiscard]] int K() const { return static_cast<int>(bounds.size()) - 1; }
  // The sublayers stage s trains.
  [[nodiscard]] SublayerRange active(int s) const {
    return {std::max(bounds[s], frozen_end), bounds[s + 1]};
  }
  // The frozen sublayers stage s's device hosts: F_frozen on stage 0 with
  // AutoPipe; without it, the frozen sublayers left inside the stage.
  [[nodiscard]] SublayerRange hosted_frozen(int s) const {
    if (s == 0 && bounds[0] > 0) return {0, bounds[0]};
    return {bounds[s], std::min(bounds[s + 1], frozen_end)};
  }
  // Whether `sublayer` computes its weights' gradient: past the prefix and
  // not of a layer frozen inside.
  [[nodiscard]] bool trains(int sublayer) const {
    if (sublayer < frozen_end) return false;
    if (sublayer == 0 || frozen_inside.empty()) return true;  // the stem freezes only with the prefix
    return !std::binary_search(frozen_inside.begin(), frozen_inside.end(), (sublayer - 1) / 2);
  }
  // The stage running `sublayer`; -1 for a sublayer of F_frozen (which runs
  // on stage 0's device, outside the pipeline).
  [[nodiscard]] int stage_of(int sublayer) const;
  // The device (0..K-1 within the pipeline) holding `sublayer`: stage s sits
  // on device s % K, F_frozen on stage 0's.
  [[nodiscard]] int device_of(int sublayer, int K) const {
    const int s = stage_of(sublayer);
    return s < 0 ? 0 : s % K;
  }
  friend bool operator==(const Partition&, const Partition&) = default;
};
std::ostream& operator<<(std::ostream&, const Partition&);
// "stem..mlp.2 | att.3..mlp.5 | ..." with the frozen prefix in brackets,
// and the layers frozen inside after it ("frozen inside: 4 7").
[[nodiscard]] std::string describe(const Partition&, const ModelSpec&);
// Stage s's parameters that train (their gradients are all-reduced and
// stepped): its active sublayers' less those of layers frozen inside.
[[nodiscard]] double trained_params(const ModelSpec&, const Partition&, int stage);
// The layers frozen inside as a list, "4 7" ("-" when none): what plan.json
// and epochs.csv show.
// Inline: the trace writers (ep_traces) use it without the planner.
[[nodiscard]] inline std::string layer_list(const std::vector<int>& layers) {
  if (layers.empty()) return "-";
  std::string out;
  for (const int l : layers) out += (out.empty() ? "" : " ") + std::to_string(l);
  return out;
}
// Per stage, its layers frozen inside, "att.. | 4 | - | 7,9": what the
// plan table shows.
[[nodiscard]] std::string frozen_inside_by_stage(const Partition&);
// Sublayers per stage, e.g. "3,3,2,2".
[[nodiscard]] std::string stage_sizes(const Partition&);

// The paper's greedy load_balance, faithful to its criterion: for stage k,
// mean = S_remaining/(K-k), var = np.var(S[assigned:])/(K-k) (population
// variance), append the next unit while load_k + S_next < mean + var.
// `fixed_load0` is what partition 0 carries besides its units (the frozen
// model at lambda_frozen * S_frozen). Two guards the paper leaves implicit:
// every stage gets at least one unit, and the last stage takes the rest.
// Returns units per stage.
[[nodiscard]] std::vector<int> load_balance_greedy(std::span<const double> unit_load,
                                                   double fixed_load0, int K);
// Exact contiguous min-max partition (dynamic programming, O(K n^2)); ties
// broken towards the earliest boundaries. Every stage gets >= 1 unit.
[[nodiscard]] std::vector<int> partition_min_max(std::span<const double> unit_load,
                                                 double fixed_load0, int K);
// Per-stage loads of a partition given as units-per-stage counts.
[[nodiscard]] std::vector<double> stage_loads(std::span<const double> unit_load, double fixed_load0,
                                              std::span<const int> counts);

// The list the paper's greedy sees, as the authors' code builds it: the
// stem (patch or token embedding) while active, every attention and MLP
// sublayer, and ViT's head as two items, the final LayerNorm and the
// classifier (BERT's pooler + classifier stay one). Sizes in millions of
// parameters; `first_sublayer[i]` is the sublayer item i starts (both head
// items start the head: a cut between them moves before it).
struct PaperItems {
  std::vector<double> params_millions;
  std::vector<int> first_sublayer;
};
[[nodiscard]] PaperItems paper_items(const ModelSpec&, int frozen_layers);
// load_balance_greedy on paper_items, mapped back to sublayer bounds. When
// a cut moved before the head would empty a stage, the greedy runs on the
// glued units instead (m_partition).
[[nodiscard]] Partition greedy_partition_paper(const ModelSpec&, int frozen_layers, int K, double lambda_frozen);

// The paper's size proxy: parameters in millions (the authors' unit; the
// greedy's mean + variance criterion depends on the unit).
[[nodiscard]] std::vector<double> unit_params_millions(const ModelSpec&, const MPartition&);
[[nodiscard]] double frozen_params_millions(const ModelSpec&, const MPartition&);
// Compute per sample (forward + backward FLOPs) of each unit, for the
// optimal partitioner, which balances time rather than size.
[[nodiscard]] std::vector<double> unit_train_flops(const ModelSpec&, const MPartition&);

// The partition whose stage k takes counts[k] units of `mp`.
[[nodiscard]] Partition partition_from_counts(const MPartition& mp, std::span<const int> counts);

// Cut the model with `frozen_layers` frozen into K stages: the greedy on the
// paper's items (greedy_partition_paper, plus lambda_frozen * S_frozen on
// stage 0), or the optimal
// partitioner on compute (plus `frozen_flops0`, the frozen forward's FLOPs
// per sample on stage 0, 0 when the cache serves it). Throws ep::Error when
// fewer than K units remain.
[[nodiscard]] Partition make_partition(const ModelSpec&, int frozen_layers, int K, PartitionerKind,
                                       double lambda_frozen, double frozen_flops0);

}  // namespace ep
