// The back-end contract (iteration.hpp): one iteration's schedule, what
// each of its actions costs, and the planner's own timing of it.
#include "planner/iteration.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ep {

std::vector<int> micro_batch_sizes(int batch, int M) {
  if (M < 1 || batch < M)
    throw Error("cannot split a batch of " + std::to_string(batch) + " into " + std::to_string(M) +
                " micro-batches");
  std::vector<int> sizes(M, batch / M);
  for (int m = 0; m < batch % M; ++m) ++sizes[m];
  return sizes;
}

namespace {

SublayerRange stage_range(const Partition& p, int s) { return {p.bounds[s], p.bounds[s + 1]}; }

// The frozen layers whose output the cache entries of a fill epoch hold.
SublayerRange cached_prefix(const IterationSetup& s) {
  return ModelSpec::frozen_prefix(std::max(0, s.cache_valid_layers));
}

// A cache copy of `bytes` taking `alone` on its own, and as the node's
// replicas copy at once: their stage-0 GPUs share the node's memory link
// (and, disk tier, its disk).
struct CacheCopy {
  double alone = 0, shared = 0;
};
CacheCopy cache_copy(const PlanContext& ctx, const IterationSetup& s, double bytes, double alone) {
  const double node_bw = node_cache_bandwidth(ctx.config.cluster.host, s.cache_tier);
  return {alone, std::max(alone, cache_copiers_per_node(ctx.config.cluster, s) * bytes / node_bw)};
}

// A stage's forward of micro-batch m: the first casts the trained weights
// (bf16 autocast), later ones (and recomputes) reuse the copies; frozen
// weights (the prefix in place, layers frozen inside) take no gradient, so
// autocast casts them every time. A micro-batch its backward recomputes
// runs forward without autograd (no graph kept): a frozen forward's cost.
double stage_forward_of(const CostModel& cost, const ModelSpec& spec, const Partition& p, SublayerRange active,
                        SublayerRange frozen_in_place, int m, bool recomputed, int samples) {
  double trained = 0;
  for (int i = active.first; i < active.last; ++i) {
    const Sublayer& sub = spec.sublayers[i];
    trained += recomputed                ? cost.frozen_forward_s(sub, samples)
               : m == 0 || !p.trains(i) ? cost.forward_s(sub, samples)
                                         : cost.forward_again_s(sub, samples);
  }
  return trained + stage_frozen_forward_s(cost, spec, frozen_in_place, samples);
}

// A stage's backward: the input's gradient alone for a layer frozen inside.
double stage_backward_of(const CostModel& cost, const ModelSpec& spec, const Partition& p, SublayerRange active,
                         int samples) {
  double s = 0;
  for (int i = active.first; i < active.last; ++i)
    s += p.trains(i) ? cost.backward_s(spec.sublayers[i], samples) : cost.backward_input_s(spec.sublayers[i], samples);
  return s;
}

}  // namespace

int cache_copiers_per_node(const ClusterSpec& c, const IterationSetup& s) {
  return std::max(1, (s.replicas + c.nodes - 1) / c.nodes);
}

ScheduleOptions schedule_options(const PlanContext& ctx, const IterationSetup& s) {
  ScheduleOptions o;
  o.kind = ctx.config.planner.schedule;
  o.K = s.K;
  o.M = s.M;
  o.v = s.v;
  o.optimizer_step = true;
  if (s.replicas > 1) {
    const double bucket = ctx.config.planner.bucket_size_bytes;
    for (int st = 0; st < s.partition.K(); ++st) {
      const double grad_bytes = 4.0 * trained_params(ctx.spec, s.partition, st);
      o.buckets_per_stage.push_back(static_cast<int>(std::ceil(grad_bytes / bucket)));
    }
  }
  if (s.partition.bounds[0] > 0) {
    if (!s.cache_on) o.frozen_input = FrozenInput::Forward;
    else if (s.cache_valid_layers < 0) o.frozen_input = FrozenInput::CacheRead;
    else if (s.cache_valid_layers == 0) o.frozen_input = FrozenInput::ForwardAndCacheWrite;
    else o.frozen_input = FrozenInput::Advance;
  }
  return o;
}

IterationCosts iteration_costs(const PlanContext& ctx, const IterationSetup& s) {
  const auto& spec = ctx.spec;
  const auto& cost = ctx.cost;
  const Partition& p = s.partition;
  const int stages = p.K();
  const auto sizes = micro_batch_sizes(s.batch, s.M);
  const auto ckpt = ctx.config.training.checkpointing;
  const auto out_bytes = [&](int sublayer) { return spec.sublayers[sublayer].out_activation_bytes_per_sample; };
  // F_frozen as this iteration runs it: whole, or only the newly frozen
  // layers when advancing stale cache entries; the cache holds the output
  // of the boundary it reads (`read_at`) or writes (`write_at`).
  const SublayerRange prefix{0, p.bounds[0]};
  const bool advance = s.cache_on && s.cache_valid_layers > 0;
  const SublayerRange frozen_run = advance ? SublayerRange{cached_prefix(s).last, prefix.last} : prefix;
  const double read_at = prefix.empty() ? 0 : out_bytes((advance ? cached_prefix(s).last : prefix.last) - 1);
  const double write_at = prefix.empty() ? 0 : out_bytes(prefix.last - 1);
  // Precomputed per (stage, micro-batch): the functions are called once per action.
  std::vector<std::vector<double>> fwd(stages, std::vector<double>(s.M)), bwd = fwd, act = fwd, act_bytes = fwd;
  std::vector<double> frozen(s.M), read_bytes(s.M), write_bytes(s.M);
  std::vector<CacheCopy> cache_read(s.M), cache_write(s.M);
  for (int m = 0; m < s.M; ++m) {
    const int b = sizes[m];
    frozen[m] = stage_frozen_forward_s(cost, spec, frozen_run, b);
    read_bytes[m] = b * read_at;
    write_bytes[m] = b * write_at;
    cache_read[m] = cache_copy(ctx, s, read_bytes[m], cost.cache_read_s(read_bytes[m], s.cache_tier));
    cache_write[m] = cache_copy(ctx, s, write_bytes[m], cost.cache_write_s(write_bytes[m], s.cache_tier));
    for (int st = 0; st < stages; ++st) {
      const SublayerRange a = p.active(st);
      const SublayerRange in_place = st == 0 && p.bounds[0] > 0 ? SublayerRange{} : p.hosted_frozen(st);
      const bool recompute = recomputes(ckpt, m, s.M);
      fwd[st][m] = stage_forward_of(cost, spec, p, a, in_place, m, recompute, b);
      bwd[st][m] = stage_backward_of(cost, spec, p, a, b) + (recompute ? stage_forward_again_s(cost, spec, a, b) : 0.0);
      act_bytes[st][m] = b * out_bytes(stage_range(p, st).last - 1);
      act[st][m] = cost.p2p_s(act_bytes[st][m], LinkKind::IntraNode);
    }
  }
  const ScheduleOptions o = schedule_options(ctx, s);
  const LinkKind dp_link = s.replicas_span_nodes ? LinkKind::InterNode : LinkKind::IntraNode;
  std::vector<double> ar(stages, 0), ar_bytes(stages, 0), opt(stages);
  for (int st = 0; st < stages; ++st) {
    const double params = trained_params(spec, p, st);
    opt[st] = params > 0 ? cost.optimizer_step_s(params) + (s.grad_norms ? cost.grad_norms_s(params) : 0.0) : 0.0;
    if (!o.buckets_per_stage.empty() && o.buckets_per_stage[st] > 0) {
      ar_bytes[st] = 4.0 * params / o.buckets_per_stage[st];
      ar[st] = cost.allreduce_s(ar_bytes[st], s.replicas, dp_link);
    }
  }
  // A stage with nothing to train has no backward, and nothing needs the
  // gradient of the first trained sublayer's input.
  std::vector<bool> trains(stages);
  for (int st = 0; st < stages; ++st) trains[st] = !p.active(st).empty();
  const auto grad_needed = [trains](int st) { return trains[st] && st > 0 && trains[st - 1]; };

  const bool behind = s.cache_writes_behind, ahead = s.cache_reads_ahead;
  IterationCosts c;
  c.duration = [=](const Action& a) -> double {
    const int st = a.stage, m = a.microbatch;
    switch (a.kind) {
      case ActionKind::Forward: return fwd[st][m];
      case ActionKind::Backward: return trains[st] ? bwd[st][m] : 0.0;
      case ActionKind::RecvAct: return act[st - 1][m];
      case ActionKind::RecvGrad: return grad_needed(st + 1) ? act[st][m] : 0.0;
      case ActionKind::SendAct:
      case ActionKind::SendGrad: return 0.0;  // asynchronous; the receiver pays the transfer
      case ActionKind::AllReduce: return ar[st];
      case ActionKind::OptimizerStep: return opt[st];
      case ActionKind::FrozenForward: return frozen[m];
      case ActionKind::CacheRead: return ahead ? 0.0 : cache_read[m].shared;
      case ActionKind::CacheWrite: return behind ? 0.0 : cache_write[m].shared;
    }
    return 0.0;
  };
  c.behind = [=](const Action& a) -> double {
    if (a.kind == ActionKind::CacheRead) return ahead ? cache_read[a.microbatch].shared : 0.0;
    return behind && a.kind == ActionKind::CacheWrite ? cache_write[a.microbatch].shared : 0.0;
  };
  c.alone = [=](const Action& a) -> double {
    return a.kind == ActionKind::CacheRead ? cache_read[a.microbatch].alone
           : a.kind == ActionKind::CacheWrite ? cache_write[a.microbatch].alone
                                               : 0.0;
  };
  // SendAct(s)/RecvAct(s+1) carry stage s's output; SendGrad(s+1)/RecvGrad(s)
  // carry the gradient of that same tensor.
  c.bytes = [=](const Action& a) -> double {
    const int st = a.stage, m = a.microbatch;
    switch (a.kind) {
      case ActionKind::SendAct: return act_bytes[st][m];
      case ActionKind::RecvAct: return act_bytes[st - 1][m];
      case ActionKind::SendGrad: return grad_needed(st) ? act_bytes[st - 1][m] : 0.0;
      case ActionKind::RecvGrad: return grad_needed(st + 1) ? act_bytes[st][m] : 0.0;
      case ActionKind::AllReduce: return ar_bytes[st];
      case ActionKind::CacheRead: return read_bytes[m];
      case ActionKind::CacheWrite: return write_bytes[m];
      default: return 0.0;
    }
  };
  return c;
}

namespace {

// `schedule` (lowered from `s`, or a timing program's) under the cost model.
Timeline predict_schedule(const PlanContext& ctx, const IterationSetup& s, const Schedule& schedule) {
  const IterationCosts costs = iteration_costs(ctx, s);
  const ClusterSpec& cl = ctx.config.cluster;
  const int per_node = std::max(1, (s.replicas + cl.nodes - 1) / cl.nodes);
  const double share = cl.shared_cores > 0 ? std::max(1.0, static_cast<double>(s.K * per_node) / cl.shared_cores) : 1.0;
  const DurationFn stretched = [&](const Action& a) {
    return is_compute(a.kind) || a.kind == ActionKind::CacheRead || a.kind == ActionKind::CacheWrite
               ? share * costs.duration(a)
               : costs.duration(a);
  };
  Timeline t = simulate(schedule, share == 1.0 ? costs.duration : stretched);
  // In steady state each device's reads ahead and its writes behind each
  // take at most an iteration (the host link runs both ways at once).
  for (const auto& list : schedule.devices) {
    double reader = 0, writer = 0;
    for (const Action& a : list) (a.kind == ActionKind::CacheRead ? reader : writer) += costs.behind(a);
    t.makespan = std::max({t.makespan, reader, writer});
  }
  return t;
}

}  // namespace

Timeline predict_iteration(const PlanContext& ctx, const IterationSetup& s) {
  return predict_schedule(ctx, s, build_schedule(schedule_options(ctx, s)));
}

IterationPredictor analytic_predictor(const PlanContext& ctx) {
  return [&ctx](const std::vector<IterationProgram>& programs, PredictionUse) {
    std::vector<IterationPrediction> out;
    for (const IterationProgram& p : programs) {
      const Timeline t = predict_schedule(ctx, p.setup, p.schedule);  // a timing program's has no step
      out.push_back({t.makespan, t.bubble_fraction()});
    }
    return out;
  };
}

}  // namespace ep
