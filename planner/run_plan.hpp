// The run planner: config -> the whole training's sequence of Plans, one per
// freeze step, deterministic. Sim and exec carry these out; they decide
// nothing themselves.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "planner/autodp.hpp"
#include "planner/autopipe.hpp"
#include "planner/cache_policy.hpp"
#include "planner/freeze.hpp"

namespace ep {

// A woken replica and the live replica that sends it the training state.
struct Onboarding {
  int rank = 0;
  int source = 0;
  friend bool operator==(const Onboarding&, const Onboarding&) = default;
};

// One candidate the planner weighed at a freeze step (objective "time"):
// the predicted time to the end of training if it were kept from here on.
struct Alternative {
  int frozen_layers = 0;  // the count it trains with: the policy's, or (kept) the previous plan's
  bool kept = false;      // the previous plan continued unchanged: the freeze step not acted on
  int K = 0;
  int M = 0;
  int replicas = 0;
  bool cache = false;
  bool frozen_in_stages = false;  // FrozenPlacement::InStages (autopipe.hpp)
  std::string stages;           // sublayers per stage, e.g. "3,3,2,2"
  double iteration_s = 0;       // steady state
  double fill_iteration_s = 0;  // the first epoch's, when it fills or advances the cache
  double transition_s = 0;      // entering it from the previous plan
  double remaining_s = 0;       // transition + every remaining epoch, kept from its step on
  double to_end_s = 0;          // confirmed ones: its step, then acting or not on each later step (0: not valued)
  bool fits_memory = true;
  bool confirmed = false;  // timed by the back end's predictor, not only the planner's timeline
  bool chosen = false;
  friend bool operator==(const Alternative&, const Alternative&) = default;
};

// What the activation cache does in one epoch.
enum class CacheRole { Off, Fill, Advance, Read };
[[nodiscard]] std::string to_string(CacheRole);

struct Plan {
  int id = 0;
  int freeze_step = 0;  // T; 0 is the initial plan
  int first_epoch = 0;  // epochs [first_epoch, end_epoch) run this plan
  int end_epoch = 0;
  int frozen_layers = 0;   // the layers this plan trains frozen
  int frozen_allowed = 0;  // the layers the freeze policy allowed frozen at this step (>= frozen_layers)
  // A per-layer policy's layers allowed frozen past that prefix (sorted;
  // decision 0037); those acted on are partition.frozen_inside.
  std::vector<int> frozen_inside_allowed;
  // Where a per-layer policy left the choice of layers to the planner: which
  // it chose and why (predicted seconds to the end of each set weighed).
  std::string frozen_set_reason;
  // Objective "time": why the step was acted on or not (predicted seconds
  // to the end either way); empty where it had no choice.
  std::string freeze_reason;
  // Whether the step ran AutoCache's probe at frozen_allowed before it was
  // planned (RunPlanner::probes): its cost is in the transition either way.
  bool cache_probed = false;
  bool cache_probe_set_up = false;  // it is the run's first probe: it also sets the probe up
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
  std::vector<Onboarding> onboarding;  // for each woken rank, who sends it the state
  double lr_scale = 1;  // training.batch_policy: replicas / those of planner.K with lr_scaled, else 1
  int batch = 0;        // samples per pipeline and iteration: pipeline_batch(config, K)
  CacheDecision cache;
  // With the cache off: where a later freeze step may turn it on, the tier
  // of the node's file, which the back end makes while this plan trains
  // (cache_file_ahead in cache_policy.hpp); nullopt: none is kept.
  std::optional<CacheTier> cache_file_ahead;
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
  // Activation recomputation (training.checkpointing): in every stage,
  // micro-batches 0 .. recomputed_microbatches-1 rerun their forward in the
  // backward (recomputes() in memory.hpp, one rule for the cost model, the
  // memory model and the executor).
  int recomputed_microbatches = 0;
  double predicted_transition_s = 0;  // entering this plan (planner/transition.hpp)
  std::vector<Alternative> alternatives;  // objective "time": what was weighed, best first
  // What the back ends carry out, lowered by RunPlanner::next: the steady
  // state, and the first epoch's iteration when it (re)fills the cache
  // (empty otherwise). Not in plan.json: it follows from the fields above.
  IterationProgram program;
  IterationProgram fill_program;
  [[nodiscard]] int epochs() const { return end_epoch - first_epoch; }
  // The frozen set the policy allowed at this step, and the one the plan trains.
  [[nodiscard]] FrozenSet allowed_set() const { return {frozen_allowed, frozen_inside_allowed}; }
  [[nodiscard]] FrozenSet frozen_set() const { return {frozen_layers, partition.frozen_inside}; }
  // Fill in the plan's first epoch when it (re)fills the cache, read after.
  [[nodiscard]] CacheRole cache_role(int epoch) const;
  // Its epochs' predicted seconds (the filling one at fill_iteration_s),
  // transition excluded.
  [[nodiscard]] double predicted_epochs_s() const;
  // The program epoch `epoch` runs (fill_program when it fills or advances).
  [[nodiscard]] const IterationProgram& program_for(int epoch) const;
};

struct RunPlan {
  std::string config_source;
  std::string cost_model;
  int L = 0;
  int K0 = 0;
  double compression_limit = 0;  // M_GPU^(0) (M params) or device memory (bytes)
  CompressionKind compression = CompressionKind::Paper;
  Objective objective = Objective::Time;
  BatchPolicy batch_policy = BatchPolicy::Global;  // how Plan::batch and lr_scale follow the replicas
  std::vector<int> reachable_K;  // every K a plan of this run may take (reachable_K())
  bool freeze_from_alpha_bound = false;  // gradient_norm policy planned without gradient norms
  double peak_flops_per_s = 0;  // every device of the cluster together, for the plans' utilisation
  std::vector<Plan> plans;
  // Compute and communication as the cost model predicts them; transition
  // costs, cache fills and stragglers are the simulator's business.
  [[nodiscard]] double predicted_total_s() const;
};

// Plans one freeze step at a time, driven by the run loop (run_loop.hpp):
// the frozen counts come from measured gradient norms as training goes, or
// (planning ahead) from a replayed trace or the alpha bound. `predict` times one iteration for the chunk search and the
// plan's predicted throughput; empty: the analytic predictor. Holds
// references to the config and the cost model.
class RunPlanner {
 public:
  // `host_cores`: the cores of the machine running one node's pipelines
  // (PlanContext::host_cores), for the programs' thread counts; 0: none.
  RunPlanner(const Config&, const CostModel&, const IterationPredictor& predict = {}, int host_cores = 0);
  RunPlanner(const RunPlanner&) = delete;
  RunPlanner& operator=(const RunPlanner&) = delete;

  // The freeze policy's decision for the next step (T = run().plans.size()
  // >= 1), from the gradient norms a back end measured since the last step
  // (per layer, mean over iterations); without them (planning ahead) a
  // replayed trace, else the alpha bound (run().freeze_from_alpha_bound).
  // It says which layers may freeze; next() decides whether to act on it.
  // `reason`: where the planner chose the layers, why (else left empty).
  [[nodiscard]] FrozenSet frozen_after(std::span<const double> grad_norms, std::string* reason = nullptr);
  // Whether the next step (T = run().plans.size()) probes the cache at
  // `frozen_allowed` before it is planned: AutoCache with AutoPipe, at a
  // depth not probed before, and (objective "time") only where a plan with
  // the cache is predicted, by the cost model, to pay for the probe. The
  // same answer on every process and on a resumed run's replay.
  [[nodiscard]] bool probes(int frozen_allowed);
  // Freeze step T happens at the end of epoch T * interval, for
  // T = 1..freeze_steps(); a step at the end of the last epoch would change
  // nothing.
  [[nodiscard]] int freeze_steps() const { return steps_; }
  // Plans freeze step T = run().plans.size() (0: the initial plan), the
  // freeze policy allowing `frozen_allowed` layers frozen. Objective "time"
  // acts on it only where that is predicted faster to the end of training
  // (transitions and cache fills included) than keeping the previous plan
  // unchanged; deferring only trains layers longer, and a later step acts
  // on the policy's later count. Objective "paper" always acts. Throws
  // ep::Error past the last step or when frozen_allowed is below the
  // previous step's or above L - min_active.
  // `frozen_inside`: a per-layer policy's layers past the prefix (sorted,
  // each > frozen_allowed), the step's before and more.
  const Plan& next(int frozen_allowed, const std::vector<int>& frozen_inside = {}, std::string frozen_set_reason = {});
  // A back end's measured cache read and frozen forward (per batch) at a
  // frozen depth; plans at that depth decide the cache on them.
  void measured_cache(int frozen_layers, const MeasuredCache& m) { measured_cache_[frozen_layers] = m; }
  [[nodiscard]] const RunPlan& run() const { return run_; }
  // The plans, moved out once the training is walked (a plan per freeze
  // step: thousands of steps would otherwise be held twice).
  [[nodiscard]] RunPlan take() && { return std::move(run_); }
  [[nodiscard]] const PlanContext& context() const { return ctx_; }

 private:
  // What a step is planned after: the plan in force before it (none: the
  // first step) and the frozen depth the cache's entries hold. after() is
  // the run's; the lookahead plans later steps after other plans.
  struct After {
    const Plan* previous = nullptr;
    int cached_layers = 0;
  };
  [[nodiscard]] After after() const { return {run_.plans.empty() ? nullptr : &run_.plans.back(), cached_layers_}; }
  // The plan's layout-dependent fields for K, partition and cache.
  Plan shape(const Plan& base, const After&, int K, Partition partition, CacheDecision cache) const;
  // M: the back end's chunk search (the whole range, or `only_M`).
  void choose_M(Plan& plan, const std::vector<int>& only_M = {});
  // Predicted times and memory at the plans' M: one question to the back
  // end's predictor for all of them, so that it can answer them at once.
  void time_with_backend(const std::vector<Plan*>& plans);
  Plan choose_paper(Plan base);
  // Objective "time": the alternatives, best first (weigh), each the best M
  // of one (K, cache, placement) by the planner's own timeline (best_M);
  // choose_time has the back end confirm the best and picks.
  struct Candidate {
    Plan plan;
    double remaining = 0;  // kept from its step to the end (the timeline's ranking)
    double to_end = 0;     // value_s, where the back end timed it
    bool timed = false;    // by the back end (confirmed)
    std::vector<std::pair<double, int>> by_M;  // (remaining, M) that fit: the shortlist the back end times
  };
  [[nodiscard]] std::optional<Candidate> best_M(const Plan& base, const After&, int K, const CacheDecision&,
                                                FrozenPlacement) const;
  [[nodiscard]] std::vector<Candidate> weigh(const Plan& base, const After&) const;
  // Objective "time": the candidates (best first) the back end times, and
  // those candidates timed by its chunk search and predictor.
  [[nodiscard]] static std::vector<std::size_t> finalists(const std::vector<Candidate>&);
  [[nodiscard]] std::vector<Candidate> confirmed(const std::vector<Candidate>&, const std::vector<std::size_t>& which);
  // The previous plan continued unchanged through this step (objective "time").
  [[nodiscard]] std::optional<Candidate> kept(const Plan& base) const;
  Plan choose_time(Plan base);
  // Objective "time" with the later steps in view (lookahead.cpp): `p`'s
  // transition and step, then the least time to the end acting or not on
  // each later step's projected count; future_s is that least time after
  // `in_force`'s step, the cache's entries at `cached_layers`; follow_on is
  // `like` planned at step T after another plan (its transition and fill).
  [[nodiscard]] double value_s(const Plan& p);
  [[nodiscard]] double future_s(const Plan& in_force, int cached_layers);
  [[nodiscard]] Plan follow_on(const Plan& like, int T, int allowed, const After&) const;
  // The candidates at later step T's projected depth, best first (weigh);
  // the one a lookahead acts with is timed by the back end (act_at).
  [[nodiscard]] std::vector<Candidate>& menu_at(int T, int allowed);
  [[nodiscard]] std::optional<Plan> act_at(int T, int allowed, int max_K);
  // Step T's plan before it is chosen: its epochs and what the policy allows.
  [[nodiscard]] Plan step_base(int T, int frozen_allowed) const;
  // A per-layer policy planning ahead: `count` layers frozen, `before`
  // among them; the rest chosen by predicted time (frozen_set.cpp).
  [[nodiscard]] FrozenSet choose_frozen_set(int T, const std::vector<int>& before, int count, std::string& reason) const;
  [[nodiscard]] double rollout_s(int T, FrozenSet set) const;
  [[nodiscard]] std::vector<int> K_candidates(const Plan& base, const After&) const;
  [[nodiscard]] std::vector<CacheDecision> cache_candidates(int frozen_layers) const;
  [[nodiscard]] double remaining_s(const Plan&) const;

  PlanContext ctx_;
  FreezeDecider freeze_;
  IterationPredictor predict_;
  ChunkSearch search_;
  SamplerSpec sampler_;
  int steps_ = 0;
  int K_ = 0;
  std::map<int, bool> probes_;  // step T -> probes(): memoised, asked by the loop and by next()
  std::map<std::pair<int, int>, std::vector<Candidate>> menus_;  // menu_at, for the step being decided
  int menu_step_ = -1;
  std::map<int, MeasuredCache> measured_cache_;
  int cached_layers_ = 0;  // depth the cache entries hold (entries outlive a plan without cache)
  RunPlan run_;
};

// Seconds as the plans' reasons give them: "12.3 s".
[[nodiscard]] std::string seconds_text(double s);

// The whole run, ahead of time: the run loop (run_loop.hpp) with nothing
// measured (a gradient-norm policy without recorded norms plans with the
// alpha bound). Defined in run_loop.cpp.
[[nodiscard]] RunPlan plan_run(const Config&, const CostModel&, const IterationPredictor& predict = {});

// The replica layout for pipeline length K: AutoDP's (I/K pipelines per
// node) or, with AutoDP off, the initial replicas shrunk in place.
[[nodiscard]] ReplicaLayout replica_layout(const Config&, int K);
// The same with `replicas` pipelines instead (validate's plans): spread
// evenly over the nodes, each in the first K devices of its block. Throws
// ep::Error when they do not tile the cluster.
[[nodiscard]] ReplicaLayout replica_layout(const Config&, int K, int replicas);

// Every K a run's plans may take: planner.K and, with AutoPipe, its
// halvings (compression, the time objective's choice, or too few sublayers
// left for K * v stages may reach any of them).
[[nodiscard]] std::vector<int> reachable_K(const Config&);
// Samples per pipeline and iteration at pipeline length K
// (training.batch_policy): batch_size, or with "global" the global batch of
// batch_size times the replicas of planner.K split among K's replicas,
// rounded up (the global batch grows by less than one sample per replica).
[[nodiscard]] int pipeline_batch(const Config&, int K);

// The iteration a back end runs for a plan: steady state, or (fill = true)
// the first epoch of a plan with cache_fill_from >= 0.
[[nodiscard]] IterationSetup iteration_setup(const Config&, const Plan&, bool fill);

// A readable table, one row per freeze step, with the reasons for K.
[[nodiscard]] std::string format_run_plan(const RunPlan&, const ModelSpec&);
[[nodiscard]] nlohmann::json to_json(const RunPlan&, const ModelSpec&);

}  // namespace ep
