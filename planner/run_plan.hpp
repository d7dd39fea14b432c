// The run planner: config -> the whole training's sequence of Plans, one per
// freeze step, deterministic. Sim and exec carry these out; they decide
// nothing themselves.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "planner/autodp.hpp"
#include "planner/autopipe.hpp"
#include "planner/cache_policy.hpp"

namespace ep {

struct Plan {
  int id = 0;
  int freeze_step = 0;  // T; 0 is the initial plan
  int first_epoch = 0;  // epochs [first_epoch, end_epoch) run this plan
  int end_epoch = 0;
  int frozen_layers = 0;
  int K = 0;
  int v = 1;
  Partition partition;              // K * v stages
  std::vector<double> stage_loads;  // the paper's proxy, M params (lambda on frozen)
  CompressionResult compression;    // how K was reached at this step
  int M = 0;
  std::vector<ChunkCandidate> chunk_table;  // when chosen by this plan's chunk search
  bool fits_memory = true;
  double max_device_memory_bytes = 0;
  ReplicaLayout layout;
  std::vector<int> woken_ranks;  // processes a transition into this plan starts
  double lr_scale = 1;  // training.batch_policy: replicas / initial replicas with lr_scaled, else 1
  CacheDecision cache;
  // With the cache on, whether the plan's first epoch (re)fills it: -1 no
  // (the entries are valid), else the frozen depth the entries hold before
  // it (0: none yet). See IterationSetup::cache_valid_layers.
  int cache_fill_from = -1;
  double fill_iteration_s = 0;  // predicted iteration time of that epoch
  std::int64_t iterations_per_epoch = 0;
  std::int64_t padding_slots_per_epoch = 0;  // masked sampler slots, all nodes (autodp.hpp)
  double iteration_s = 0;      // predicted by the cost model
  double bubble_fraction = 0;  // predicted
  double samples_per_s = 0;    // all replicas, predicted
  [[nodiscard]] int epochs() const { return end_epoch - first_epoch; }
};

struct RunPlan {
  std::string config_source;
  std::string cost_model;
  int L = 0;
  int K0 = 0;
  double compression_limit = 0;  // M_GPU^(0) (M params) or device memory (bytes)
  CompressionKind compression = CompressionKind::Paper;
  bool freeze_from_alpha_bound = false;  // gradient_norm policy planned without gradient norms
  std::vector<Plan> plans;
  // Compute and communication as the cost model predicts them; transition
  // costs, cache fills and stragglers are the simulator's business.
  [[nodiscard]] double predicted_total_s() const;
};

// Plans one freeze step at a time. The executor feeds it the frozen counts
// its measured gradient norms decide as training goes; plan_run feeds it the
// freeze timeline. `predict` times one iteration for the chunk search and the
// plan's predicted throughput; empty: the analytic predictor. Holds
// references to the config and the cost model.
class RunPlanner {
 public:
  RunPlanner(const Config&, const CostModel&, const IterationPredictor& predict = {});
  RunPlanner(const RunPlanner&) = delete;
  RunPlanner& operator=(const RunPlanner&) = delete;

  // Freeze step T happens at the end of epoch T * interval, for
  // T = 1..freeze_steps(); a step at the end of the last epoch would change
  // nothing.
  [[nodiscard]] int freeze_steps() const { return steps_; }
  // Plans freeze step T = run().plans.size() (0: the initial plan) with
  // `frozen_layers` frozen. Throws ep::Error past the last step or when
  // frozen_layers is below the previous step's or above L - min_active.
  const Plan& next(int frozen_layers);
  // A back end's measured cache read and frozen forward (per batch) at a
  // frozen depth; plans at that depth decide the cache on them.
  void measured_cache(int frozen_layers, const MeasuredCache& m) { measured_cache_[frozen_layers] = m; }
  [[nodiscard]] const RunPlan& run() const { return run_; }
  [[nodiscard]] const PlanContext& context() const { return ctx_; }

 private:
  PlanContext ctx_;
  IterationPredictor predict_;
  ChunkSearch search_;
  SamplerSpec sampler_;
  int steps_ = 0;
  int K_ = 0;
  std::map<int, MeasuredCache> measured_cache_;
  int cached_layers_ = 0;  // depth the cache entries hold (entries outlive a plan without cache)
  RunPlan run_;
};

// The whole run, ahead of time: RunPlanner driven by freeze_timeline (a
// gradient-norm policy without recorded norms plans with the alpha bound).
[[nodiscard]] RunPlan plan_run(const Config&, const CostModel&, const IterationPredictor& predict = {});

// The replica layout for pipeline length K: AutoDP's (I/K pipelines per
// node) or, with AutoDP off, the initial replicas shrunk in place.
[[nodiscard]] ReplicaLayout replica_layout(const Config&, int K);

// The iteration a back end runs for a plan: steady state, or (fill = true)
// the first epoch of a plan with cache_fill_from >= 0.
[[nodiscard]] IterationSetup iteration_setup(const Config&, const Plan&, bool fill);

// A readable table, one row per freeze step, with the reasons for K.
[[nodiscard]] std::string format_run_plan(const RunPlan&, const ModelSpec&);
[[nodiscard]] nlohmann::json to_json(const RunPlan&, const ModelSpec&);

}  // namespace ep
