#include "planner/transition.hpp"

#include <algorithm>
#include <map>

#include "planner/cache_policy.hpp"
#include "planner/memory.hpp"
#include "planner/run_loop.hpp"

namespace ep {

namespace {

bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

const ReplicaLayout::Replica& replica_of(const ReplicaLayout& l, int rank) {
  const auto it = std::find_if(l.replica.begin(), l.replica.end(), [&](const auto& r) { return r.rank == rank; });
  if (it == l.replica.end()) throw Error("transition: rank " + std::to_string(rank) + " is not in the layout");
  return *it;
}

// Weights and optimizer state of the sublayers: what moves with them.
double state_bytes(const PlanContext& ctx, SublayerRange active, SublayerRange frozen) {
  const MemoryBreakdown m = stage_memory(ctx.spec, ctx.config.training, StageLoad{active, frozen, 1, 1});
  return m.weights_bytes + m.optimizer_bytes;
}

}  // namespace

std::vector<Onboarding> onboarding_sources(const ReplicaLayout& previous, const ReplicaLayout& next,
                                           const std::vector<int>& woken) {
  std::vector<Onboarding> out;
  std::map<int, int> used;  // node -> woken ranks served from it so far
  int any = 0;
  for (const int rank : woken) {
    const int node = replica_of(next, rank).node;
    std::vector<int> local;
    for (const auto& r : previous.replica)
      if (r.node == node && contains(next.active_ranks, r.rank)) local.push_back(r.rank);
    int source = 0;
    if (!local.empty()) {
      source = local[used[node]++ % local.size()];
    } else {
      if (previous.active_ranks.empty()) throw Error("transition: no live replica to onboard rank " + std::to_string(rank));
      source = previous.active_ranks[any++ % previous.active_ranks.size()];
    }
    out.push_back({rank, source});
  }
  return out;
}

std::vector<StateMove> state_moves(const PlanContext& ctx, const Plan& prev, const Plan& plan) {
  std::map<std::pair<int, int>, double> moves;
  const int n = ctx.spec.num_sublayers();
  for (const auto& r : plan.layout.replica) {
    if (!contains(prev.layout.active_ranks, r.rank)) continue;
    const auto& old = replica_of(prev.layout, r.rank);
    for (int i = 0; i < n; ++i) {
      const int src = old.gpus[prev.partition.device_of(i, prev.K)];
      const int dst = r.gpus[plan.partition.device_of(i, plan.K)];
      const bool active = i >= plan.partition.frozen_end;
      if (src != dst)
        moves[{src, dst}] += state_bytes(ctx, active ? SublayerRange{i, i + 1} : SublayerRange{},
                                         active ? SublayerRange{} : SublayerRange{i, i + 1});
    }
  }
  for (const Onboarding& o : plan.onboarding) {
    const auto& dst = replica_of(plan.layout, o.rank);
    const auto& src = replica_of(plan.layout, o.source);
    for (int s = 0; s < plan.partition.K(); ++s) {
      const int d = s % plan.K;
      moves[{src.gpus[d], dst.gpus[d]}] += state_bytes(ctx, plan.partition.active(s), plan.partition.hosted_frozen(s));
    }
  }
  std::vector<StateMove> out;
  for (const auto& [pair, bytes] : moves) out.push_back({pair.first, pair.second, bytes});
  return out;
}

bool repartitioned(const Plan& prev, const Plan& plan) {
  return prev.partition.bounds != plan.partition.bounds || prev.K != plan.K;
}

namespace {

// What a process pays once before its iterations run as its later ones do
// (its device context, its first iteration's one-off work), as a profile
// measured it, else the config's figures for the context and the warm-up.
TransitionCost process_start(const TransitionSpec& k, const CostModel& cost) {
  TransitionCost t;
  if (const std::optional<double> first = cost.first_iteration_s()) {
    t.contexts_s = cost.device_context_s().value_or(0.0) + *first;
  } else {
    t.contexts_s = k.context_creation_s;
    t.warmup_s = k.pipeline_warmup_s;
  }
  return t;
}

}  // namespace

TransitionCost predict_transition(const PlanContext& ctx, const Plan* prev, const Plan& plan) {
  const TransitionSpec& k = ctx.config.cluster.transition;
  const CostModel& cost = ctx.cost;
  const int ranks = plan.layout.replicas;
  const double rebuild = ranks > 1 ? cost.group_rebuild_s(ranks).value_or(k.ddp_rebuild_s) : 0.0;
  if (!prev) {
    TransitionCost t = process_start(k, cost);
    t.rebuild_s = rebuild;
    return t;
  }
  const bool moved = repartitioned(*prev, plan);
  const bool regrouped = prev->layout.active_ranks != plan.layout.active_ranks;
  if (!moved && !regrouped && prev->frozen_layers == plan.frozen_layers) return {};
  TransitionCost t;
  const int I = ctx.config.cluster.gpus_per_node;
  for (const StateMove& m : state_moves(ctx, *prev, plan)) {
    const LinkKind link = m.src_gpu / I == m.dst_gpu / I ? LinkKind::IntraNode : LinkKind::InterNode;
    t.state_s += cost.p2p_s(m.bytes, link) + cost.state_pack_s(m.bytes).value_or(0.0);
  }
  // A woken process pays what the run's start does before its iterations
  // (it does so in its first iteration, every replica's all-reduce waiting).
  t.contexts_s = plan.woken_ranks.empty() ? 0.0 : process_start(k, cost).contexts_s;
  // A transition rebuilds the active group and DDP: there is none to
  // rebuild for one replica (the executor measures ~0 s there).
  t.rebuild_s = rebuild;
  // The executor meets a first slow iteration whenever the frozen count or
  // the partition changes (what runs without autograd changes, and with it
  // the kernels and the allocations), so it is charged for both.
  const bool refrozen = plan.frozen_layers != prev->frozen_layers;
  t.warmup_s = moved || refrozen ? cost.freeze_warmup_s().value_or(k.pipeline_warmup_s) : 0.0;
  // The executor creates the node's file when a plan first turns the cache
  // on and keeps it (a cache turned off and on again is charged again).
  if (plan.cache.on && !prev->cache.on) {
    t.cache_create_s = cost.cache_create_s(plan.cache.bytes_per_node, plan.cache.tier).value_or(0.0);
    // Made while the previous plan trained: what its epochs do not cover.
    if (prev->cache_file_ahead == plan.cache.tier)
      t.cache_create_s = std::max(0.0, t.cache_create_s - prev->predicted_epochs_s());
  }
  // Frozen layers only grow: the first step that freezes any probes first.
  if (refrozen && probes_cache(ctx.config, plan.frozen_layers))
    t.cache_probe_s = predict_cache_probe_s(ctx.config, ctx.spec, cost, plan.frozen_layers,
                                            ctx.config.training.batch_size, prev->frozen_layers == 0);
  return t;
}

IterationProgram start_program(const PlanContext& ctx, const Plan& plan, int epoch) {
  const IterationProgram& program = plan.program_for(epoch);
  IterationProgram start = timing_program(ctx, program);
  // Every replica runs its own start at the same time, none waiting for
  // another (no all-reduce): the plan's replicas, sharing what they share.
  start.setup.replicas = program.setup.replicas;
  start.layout = program.layout;
  return start;
}

TransitionCost predict_start(const PlanContext& ctx, const Plan& plan, const IterationPredictor& predict) {
  TransitionCost t = predict_transition(ctx, nullptr, plan);
  const std::vector<IterationPrediction> start =
      predict({start_program(ctx, plan, plan.first_epoch)}, PredictionUse::ChunkCandidate);
  t.warmup_s += kStartIterations * start.at(0).iteration_s;
  return t;
}

}  // namespace ep
