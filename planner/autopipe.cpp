#include "planner/autopipe.hpp"

#include "planner/run_plan.hpp"  // pipeline_batch

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ep {

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
    // Recomputed: the forward without autograd, then again with it in the backward.
    const double f = recompute ? stage_frozen_forward_s(cost, spec, active, micro_batch) +
                                     stage_forward_again_s(cost, spec, active, micro_batch)
                               : stage_forward_s(cost, spec, active, micro_batch);
    load.push_back(stage_frozen_forward_s(cost, spec, frozen, micro_batch) + f +
                   stage_backward_s(cost, spec, active, micro_batch));
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
double max_device_memory(const ModelSpec& spec, const TrainingConfig& t, const Partition& p, int K, int M,
                         int batch) {
  const int b = (batch + M - 1) / M;
  std::vector<double> per_device(K, 0.0);
  for (int s = 0; s < p.K(); ++s) {
    per_device[s % K] += stage_memory(spec, t, stage_load(spec, p, s, b, M)).total_bytes();
  }
  return *std::max_element(per_device.begin(), per_device.end());
}

namespace {

int largest_M(const Config& c, int K) {
  if (!c.planner.chunk_search) return c.planner.M;
  return std::min(pipeline_batch(c, K), c.planner.M_max_factor * K);
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
      a.m_gpu = max_device_memory(ctx.spec, c.training, p, K2, largest_M(c, K2), pipeline_batch(c, K2));
      a.accepted = a.m_gpu <= limit;
    }
    r.attempts.push_back(a);
    if (!a.accepted) break;
    r.K = K2;
  }
  return r;
}

const ChunkChoice& ChunkSearch::choose(const IterationSetup& setup, const std::vector<int>& only) {
  const auto& c = ctx_.config;
  const auto key = std::make_pair(setup.K, setup.batch);
  if (auto it = memo_.find(key); it != memo_.end()) return it->second;
  int lo = c.planner.M, hi = c.planner.M;
  if (c.planner.chunk_search) {
    lo = c.planner.M_min_factor * setup.K;
    hi = std::min(setup.batch, c.planner.M_max_factor * setup.K);
  }
  if (!c.planner.chunk_search && c.planner.M > setup.batch)
    throw c.error("planner.M",
                  "at most the per-pipeline batch at K = " + std::to_string(setup.K) + ", " +
                      std::to_string(setup.batch) + " samples (training.batch_policy = \"" +
                      to_string(c.training.batch_policy) + "\" with " + std::to_string(setup.replicas) + " replicas)",
                  std::to_string(c.planner.M));
  if (lo > hi)
    throw c.error("training.batch_size",
                  "a per-pipeline batch of at least " + std::to_string(lo) + " micro-batches at K = " +
                      std::to_string(setup.K) + " (training.batch_policy = \"" + to_string(c.training.batch_policy) +
                      "\" with " + std::to_string(setup.replicas) + " replicas)",
                  std::to_string(setup.batch) + " samples per pipeline");
  ChunkChoice choice;
  std::vector<IterationProgram> programs;
  for (int M = lo; M <= hi; ++M) {
    if (!only.empty() && std::find(only.begin(), only.end(), M) == only.end()) continue;
    IterationSetup s = setup;
    s.M = M;
    ChunkCandidate cand;
    cand.M = M;
    cand.memory_bytes = max_device_memory(ctx_.spec, c.training, s.partition, s.K, M, s.batch);
    cand.feasible = cand.memory_bytes <= c.cluster.device.memory_bytes;
    choice.table.push_back(cand);
    programs.push_back(lower_iteration(ctx_, s));
  }
  const std::vector<IterationPrediction> times = predict_(programs, PredictionUse::ChunkCandidate);
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
