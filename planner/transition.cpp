#include "planner/transition.hpp"

#include <algorithm>
#include <map>

#include "planner/cache_policy.hpp"
#include "planner/memory.hpp"

namespace ep {

namespace {

// Layouts list their ranks in increasing order (make_layout): found by
// bisection, so that a transition of thousands of replicas stays linear.
bool contains(const std::vector<int>& sorted, int x) { return std::binary_search(sorted.begin(), sorted.end(), x); }

const ReplicaLayout::Replica& replica_of(const ReplicaLayout& l, int rank) {
  const auto it = std::lower_bound(l.replica.begin(), l.replica.end(), rank,
                                   [](const ReplicaLayout::Replica& r, int x) { return r.rank < x; });
  if (it == l.replica.end() || it->rank != rank)
    throw Error("transition: rank " + std::to_string(rank) + " is not in the layout");
  return *it;
}

// Weights and optimizer state of the sublayers: what moves with them.
double state_bytes(const PlanContext& ctx, const StageLoad& load) {
  const MemoryBreakdown m = stage_memory(ctx.spec, ctx.config.training, load);
  return m.weights_bytes + m.optimizer_bytes;
}

}  // namespace

std::vector<Onboarding> onboarding_sources(const ReplicaLayout& previous, const ReplicaLayout& next,
                                           const std::vector<int>& woken) {
  std::vector<Onboarding> out;
  std::map<int, int> used;  // node -> woken ranks served from it so far
  std::map<int, std::vector<int>> live;  // node -> its replicas live before and after, in rank order
  for (const auto& r : previous.replica)
    if (contains(next.active_ranks, r.rank)) live[r.node].push_back(r.rank);
  int any = 0;
  for (const int rank : woken) {
    const int node = replica_of(next, rank).node;
    const auto found = live.find(node);
    const std::vector<int> local = found == live.end() ? std::vector<int>{} : found->second;
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
  // Every staying replica moves the same sublayers between the same
  // devices of its pipeline: summed once per (old device, new device), then
  // placed on each replica's GPUs (thousands of replicas stay linear).
  std::map<std::pair<int, int>, double> by_device;
  for (int i = 0; i < ctx.spec.num_sublayers(); ++i) {
    const bool active = plan.partition.trains(i);
    by_device[{prev.partition.device_of(i, prev.K), plan.partition.device_of(i, plan.K)}] +=
        state_bytes(ctx, StageLoad{active ? SublayerRange{i, i + 1} : SublayerRange{},
                                   active ? SublayerRange{} : SublayerRange{i, i + 1}, 1, 1});
  }
  for (const auto& r : plan.layout.replica) {
    if (!contains(prev.layout.active_ranks, r.rank)) continue;
    const auto& old = replica_of(prev.layout, r.rank);
    for (const auto& [devices, bytes] : by_device) {
      const int src = old.gpus[devices.first], dst = r.gpus[devices.second];
      if (src != dst) moves[{src, dst}] += bytes;
    }
  }
  if (!plan.onboarding.empty()) {
    std::vector<double> stage_bytes;  // what a woken replica receives per stage
    for (int s = 0; s < plan.partition.K(); ++s)
      stage_bytes.push_back(state_bytes(ctx, stage_load(ctx.spec, plan.partition, s, 1, 1)));
    for (const Onboarding& o : plan.onboarding) {
      const auto& dst = replica_of(plan.layout, o.rank);
      const auto& src = replica_of(plan.layout, o.source);
      for (int s = 0; s < plan.partition.K(); ++s) {
        const int d = s % plan.K;
        moves[{src.gpus[d], dst.gpus[d]}] += stage_bytes[static_cast<std::size_t>(s)];
      }
    }
  }
  std::vector<StateMove> out;
  for (const auto& [pair, bytes] : moves) out.push_back({pair.first, pair.second, bytes});
  return out;
}

bool repartitioned(const Plan& prev, const Plan& plan) {
  return prev.partition.bounds != plan.partition.bounds || prev.K != plan.K;
}

bool refrozen(const Plan& prev, const Plan& plan) {
  return prev.frozen_layers != plan.frozen_layers || prev.partition.frozen_inside != plan.partition.frozen_inside;
}

// The transition's terms, each a formula (docs/SIMULATOR.md, "Transition
// costs", gives their sources; cluster presets their defaults):
//   a process started (the run's, a woken one): context_creation_s, or a
//     profile's device_context + first_iteration;
//   a group made, where the active ranks or the lanes (K) change:
//     group(n) = group_setup_s + group_per_rank_s * n for n ranks, or a
//     profile's rebuild at n0 ranks scaled by group(n) / group(n0);
//   warm-up, where the frozen count or the partition changes:
//     warmup_iterations * the new plan's iteration, or a profile's
//     freeze_warmup;
//   state moved: the bytes over the links (and a profile's pack and unpack);
//   the cache's probe and file: predict_cache_probe_s, cache_create_s.
namespace {

double group_rebuild_s(const TransitionSpec& k, const CostModel& cost, int ranks) {
  if (ranks <= 1) return 0;
  const std::optional<CostModel::RebuildSample> m = cost.group_rebuild(ranks);
  if (!m) return k.group_s(ranks);
  const double at = k.group_s(m->ranks);
  return at > 0 ? m->seconds * k.group_s(ranks) / at : m->seconds;
}

// What a process pays once before its iterations run as its later ones do
// (its device context, its first iteration's one-off work), as a profile
// measured it, else the cluster's figures for the context and the warm-up.
TransitionCost process_start(const TransitionSpec& k, const CostModel& cost, double iteration_s) {
  TransitionCost t;
  if (const std::optional<double> first = cost.first_iteration_s()) {
    t.contexts_s = cost.device_context_s().value_or(0.0) + *first;
  } else {
    t.contexts_s = k.context_creation_s;
    t.warmup_s = k.warmup_iterations * iteration_s;
  }
  return t;
}

}  // namespace

double predict_warmup_s(const PlanContext& ctx, const Plan& prev, const Plan& plan) {
  if (!repartitioned(prev, plan) && !refrozen(prev, plan)) return 0;
  return ctx.cost.freeze_warmup_s().value_or(ctx.config.cluster.transition.warmup_iterations * plan.iteration_s);
}

TransitionCost predict_transition(const PlanContext& ctx, const Plan* prev, const Plan& plan) {
  const TransitionSpec& k = ctx.config.cluster.transition;
  const CostModel& cost = ctx.cost;
  const int ranks = plan.layout.replicas;
  if (!prev) {
    TransitionCost t = process_start(k, cost, plan.iteration_s);
    t.rebuild_s = group_rebuild_s(k, cost, ranks);
    return t;
  }
  TransitionCost t;
  // The probe runs before the step is planned, whatever it then decides.
  if (plan.cache_probed)
    t.cache_probe_s = predict_cache_probe_s(ctx.config, ctx.spec, cost, plan.frozen_allowed,
                                            ctx.config.training.batch_size, plan.cache_probe_set_up);
  const bool moved = repartitioned(*prev, plan);
  const bool regrouped = prev->layout.active_ranks != plan.layout.active_ranks;
  if (!moved && !regrouped && !refrozen(*prev, plan)) return t;
  const int I = ctx.config.cluster.gpus_per_node;
  for (const StateMove& m : state_moves(ctx, *prev, plan)) {
    const LinkKind link = m.src_gpu / I == m.dst_gpu / I ? LinkKind::IntraNode : LinkKind::InterNode;
    t.state_s += cost.p2p_s(m.bytes, link) + cost.state_pack_s(m.bytes).value_or(0.0);
  }
  // A woken process pays what the run's start does before its iterations
  // (it does so in its first iteration, every replica's all-reduce waiting).
  t.contexts_s = plan.woken_ranks.empty() ? 0.0 : process_start(k, cost, plan.iteration_s).contexts_s;
  // The active group is made again where its ranks or its lanes (one per
  // device of a replica: K) change; a freeze step that keeps both keeps it.
  if (regrouped || prev->K != plan.K) t.rebuild_s = group_rebuild_s(k, cost, ranks);
  // The executor meets a first slow iteration whenever the frozen count or
  // the partition changes (what runs without autograd changes, and with it
  // the kernels and the allocations), so it is charged for both.
  t.warmup_s = predict_warmup_s(ctx, *prev, plan);
  // The executor creates the node's file when a plan first turns the cache
  // on and keeps it (a cache turned off and on again is charged again).
  if (plan.cache.on && !prev->cache.on) {
    t.cache_create_s = cost.cache_create_s(plan.cache.bytes_per_node, plan.cache.tier).value_or(0.0);
    // Made while the previous plan trained: what its epochs do not cover.
    if (prev->cache_file_ahead == plan.cache.tier)
      t.cache_create_s = std::max(0.0, t.cache_create_s - prev->predicted_epochs_s());
  }
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

TransitionCost predict_start(const PlanContext& ctx, const Plan& plan, const IterationProgram& start,
                             const IterationPredictor& predict) {
  TransitionCost t = predict_transition(ctx, nullptr, plan);
  t.warmup_s += kStartIterations * predict({start}, PredictionUse::ChunkCandidate).at(0).iteration_s;
  return t;
}

}  // namespace ep
