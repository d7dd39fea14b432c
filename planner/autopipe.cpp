#include "planner/autopipe.hpp"

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

Partition plan_partition(const PlanContext& ctx, int frozen_layers, int stages, bool cache_on) {
  const auto& pc = ctx.config.planner;
  if (!pc.autopipe) {
    // Freeze without system change: the initial cut stays; frozen
    // sublayers only lose their backward.
    Partition p = make_partition(ctx.spec, 0, stages, pc.partitioner, pc.lambda_frozen, 0.0);
    p.frozen_layers = frozen_layers;
    p.frozen_end = ModelSpec::frozen_prefix(frozen_layers).last;
    return p;
  }
  double frozen_flops0 = 0;
  if (!cache_on)
    for (int s = 0; s < ModelSpec::frozen_prefix(frozen_layers).last; ++s)
      frozen_flops0 += ctx.spec.sublayers[s].fwd_flops_per_sample;
  return make_partition(ctx.spec, frozen_layers, stages, pc.partitioner, pc.lambda_frozen, frozen_flops0);
}

std::string to_string(FrozenPlacement f) { return f == FrozenPlacement::Device0 ? "device0" : "stages"; }

Partition partition_by_time(const PlanContext& ctx, int frozen_layers, int stages, bool cache_on, CacheTier tier,
                            int micro_batch, FrozenPlacement placement) {
  const ModelSpec& spec = ctx.spec;
  const CostModel& cost = ctx.cost;
  const bool in_stages = placement == FrozenPlacement::InStages && frozen_layers > 0;
  const MPartition mp = m_partition(spec, in_stages ? 0 : frozen_layers);
  const int frozen_end = ModelSpec::frozen_prefix(frozen_layers).last;
  const bool recompute = ctx.config.training.checkpointing != Checkpointing::Never;
  std::vector<double> load;
  for (const SublayerRange& u : mp.units) {
    const SublayerRange frozen{u.first, std::clamp(frozen_end, u.first, u.last)};
    const SublayerRange active{frozen.last, u.last};
    const double f = stage_forward_s(cost, spec, active, micro_batch);
    load.push_back(stage_frozen_forward_s(cost, spec, frozen, micro_batch) + f +
                   stage_backward_s(cost, spec, active, micro_batch) + (recompute ? f : 0.0));
  }
  double fixed0 = 0;
  if (mp.frozen_end > 0) {
    if (cache_on)
      fixed0 = cost.cache_read_s(micro_batch * spec.sublayers[mp.frozen_end - 1].out_activation_bytes_per_sample, tier);
    else
      fixed0 = stage_frozen_forward_s(cost, spec, {0, mp.frozen_end}, micro_batch);
  }
  Partition p = partition_from_counts(mp, partition_min_max(load, fixed0, stages));
  p.frozen_layers = frozen_layers;
  p.frozen_end = frozen_end;  // in stages: bounds[0] = 0, the frozen sublayers stay where the cut puts them
  return p;
}

std::vector<double> stage_loads_paper(const ModelSpec& spec, const Partition& p, double lambda_frozen) {
  std::vector<double> loads;
  for (int s = 0; s < p.K(); ++s)
    loads.push_back(spec.params(p.active(s)) / 1e6 +
                    lambda_frozen * spec.params(p.hosted_frozen(s)) / 1e6);
  return loads;
}

double m_gpu_paper(const ModelSpec& spec, const Partition& p, double lambda_frozen) {
  const auto loads = stage_loads_paper(spec, p, lambda_frozen);
  return *std::max_element(loads.begin(), loads.end());
}

// Memory per device: the sum over the stages (chunks) it holds.
double max_device_memory(const ModelSpec& spec, const TrainingConfig& t, const Partition& p, int K, int M) {
  const int b = (t.batch_size + M - 1) / M;
  std::vector<double> per_device(K, 0.0);
  for (int s = 0; s < p.K(); ++s) {
    const StageLoad load{p.active(s), p.hosted_frozen(s), b, M};
    per_device[s % K] += stage_memory(spec, t, load).total_bytes();
  }
  return *std::max_element(per_device.begin(), per_device.end());
}

namespace {

int largest_M(const Config& c, int K) {
  if (!c.planner.chunk_search) return c.planner.M;
  return std::min(c.training.batch_size, c.planner.M_max_factor * K);
}

}  // namespace

double compression_limit(const PlanContext& ctx) {
  const auto& c = ctx.config;
  if (c.planner.compression == CompressionKind::Memory) return c.cluster.device.memory_bytes;
  return m_gpu_paper(ctx.spec, plan_partition(ctx, 0, c.planner.K, false), c.planner.lambda_frozen);
}

CompressionResult compress(const PlanContext& ctx, int frozen_layers, int K, bool cache_on) {
  const auto& c = ctx.config;
  const int v = c.planner.virtual_stages;
  const int units = 2 * (c.model.num_hidden_layers - frozen_layers);
  CompressionResult r{K, {}};
  // Too few sublayers left for K * v stages: halving is forced.
  while (r.K > 1 && r.K * v > units) {
    r.attempts.push_back({r.K, r.K / 2, 0, 0, true,
                          "only " + std::to_string(units) + " sublayer units for K*v = " +
                              std::to_string(r.K * v) + " stages"});
    r.K /= 2;
  }
  if (c.planner.compression == CompressionKind::None) return r;
  const double limit = compression_limit(ctx);
  while (r.K > 1) {
    const int K2 = r.K / 2;
    const Partition p = plan_partition(ctx, frozen_layers, K2, cache_on);
    CompressionAttempt a{r.K, K2, 0, limit, false, {}};
    if (c.planner.compression == CompressionKind::Paper) {
      a.m_gpu = m_gpu_paper(ctx.spec, p, c.planner.lambda_frozen);
      a.accepted = a.m_gpu < limit;
    } else {
      a.m_gpu = max_device_memory(ctx.spec, c.training, p, K2, largest_M(c, K2));
      a.accepted = a.m_gpu <= limit;
    }
    r.attempts.push_back(a);
    if (!a.accepted) break;
    r.K = K2;
  }
  return r;
}

namespace {

SublayerRange stage_range(const Partition& p, int s) { return {p.bounds[s], p.bounds[s + 1]}; }

// The frozen layers whose output the cache entries of a fill epoch hold.
SublayerRange cached_prefix(const IterationSetup& s) {
  return ModelSpec::frozen_prefix(std::max(0, s.cache_valid_layers));
}

}  // namespace

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
      const double grad_bytes = 4.0 * ctx.spec.params(s.partition.active(st));
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
  const auto sizes = micro_batch_sizes(ctx.config.training.batch_size, s.M);
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
  std::vector<double> frozen(s.M), cache_read(s.M), cache_write(s.M), read_bytes(s.M), write_bytes(s.M);
  for (int m = 0; m < s.M; ++m) {
    const int b = sizes[m];
    frozen[m] = stage_frozen_forward_s(cost, spec, frozen_run, b);
    read_bytes[m] = b * read_at;
    write_bytes[m] = b * write_at;
    cache_read[m] = cost.cache_read_s(read_bytes[m], s.cache_tier);
    cache_write[m] = cost.cache_write_s(write_bytes[m], s.cache_tier);
    for (int st = 0; st < stages; ++st) {
      const SublayerRange a = p.active(st);
      const SublayerRange in_place = st == 0 && p.bounds[0] > 0 ? SublayerRange{} : p.hosted_frozen(st);
      const double f_active = stage_forward_s(cost, spec, a, b);
      fwd[st][m] = f_active + stage_frozen_forward_s(cost, spec, in_place, b);
      const bool recompute = recomputes(ckpt, m, s.M);
      bwd[st][m] = stage_backward_s(cost, spec, a, b) + (recompute ? f_active : 0.0);
      act_bytes[st][m] = b * out_bytes(stage_range(p, st).last - 1);
      act[st][m] = cost.p2p_s(act_bytes[st][m], LinkKind::IntraNode);
    }
  }
  const ScheduleOptions o = schedule_options(ctx, s);
  const LinkKind dp_link = s.replicas_span_nodes ? LinkKind::InterNode : LinkKind::IntraNode;
  std::vector<double> ar(stages, 0), ar_bytes(stages, 0), opt(stages);
  for (int st = 0; st < stages; ++st) {
    const double params = spec.params(p.active(st));
    opt[st] = params > 0 ? cost.optimizer_step_s(params) : 0.0;
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
      case ActionKind::CacheRead: return cache_read[m];
      case ActionKind::CacheWrite: return cache_write[m];
    }
    return 0.0;
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

Timeline predict_iteration(const PlanContext& ctx, const IterationSetup& s) {
  const IterationCosts costs = iteration_costs(ctx, s);
  const ClusterSpec& cl = ctx.config.cluster;
  const int per_node = std::max(1, (s.replicas + cl.nodes - 1) / cl.nodes);
  const double share = cl.shared_cores > 0 ? std::max(1.0, static_cast<double>(s.K * per_node) / cl.shared_cores) : 1.0;
  if (share == 1.0) return simulate(build_schedule(schedule_options(ctx, s)), costs.duration);
  const DurationFn stretched = [&](const Action& a) {
    return is_compute(a.kind) || a.kind == ActionKind::CacheRead || a.kind == ActionKind::CacheWrite
               ? share * costs.duration(a)
               : costs.duration(a);
  };
  return simulate(build_schedule(schedule_options(ctx, s)), stretched);
}

IterationPredictor analytic_predictor(const PlanContext& ctx) {
  return [&ctx](const std::vector<IterationSetup>& setups, PredictionUse) {
    std::vector<IterationPrediction> out;
    for (const IterationSetup& s : setups) {
      const Timeline t = predict_iteration(ctx, s);
      out.push_back({t.makespan, t.bubble_fraction()});
    }
    return out;
  };
}

const ChunkChoice& ChunkSearch::choose(const IterationSetup& setup, const std::vector<int>& only) {
  const auto& c = ctx_.config;
  const auto key = std::make_pair(setup.K, c.training.batch_size);
  if (auto it = memo_.find(key); it != memo_.end()) return it->second;
  int lo = c.planner.M, hi = c.planner.M;
  if (c.planner.chunk_search) {
    lo = c.planner.M_min_factor * setup.K;
    hi = std::min(c.training.batch_size, c.planner.M_max_factor * setup.K);
  }
  if (lo > hi)
    throw Error("chunk search: no M in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                "] for K = " + std::to_string(setup.K) + " and batch " + std::to_string(c.training.batch_size));
  ChunkChoice choice;
  std::vector<IterationSetup> setups;
  for (int M = lo; M <= hi; ++M) {
    if (!only.empty() && std::find(only.begin(), only.end(), M) == only.end()) continue;
    IterationSetup s = setup;
    s.M = M;
    ChunkCandidate cand;
    cand.M = M;
    cand.memory_bytes = max_device_memory(ctx_.spec, c.training, s.partition, s.K, M);
    cand.feasible = cand.memory_bytes <= c.cluster.device.memory_bytes;
    choice.table.push_back(cand);
    setups.push_back(std::move(s));
  }
  const std::vector<IterationPrediction> times = predict_(setups, PredictionUse::ChunkCandidate);
  for (std::size_t i = 0; i < times.size(); ++i) {
    choice.table[i].iteration_s = times[i].iteration_s;
    choice.table[i].bubble_fraction = times[i].bubble_fraction;
  }
  // The fastest M that fits; if none fits, the least memory (the plan then
  // reports that it does not fit rather than failing).
  const auto fits = [](const ChunkCandidate& a) { return a.feasible; };
  const bool any = std::any_of(choice.table.begin(), choice.table.end(), fits);
  const ChunkCandidate* best = nullptr;
  for (const auto& cand : choice.table) {
    if (any && !cand.feasible) continue;
    if (!best || (any ? cand.iteration_s < best->iteration_s : cand.memory_bytes < best->memory_bytes))
      best = &cand;
  }
  choice.M = best->M;
  choice.iteration_s = best->iteration_s;
  return memo_.emplace(key, std::move(choice)).first->second;
}

}  // namespace ep
