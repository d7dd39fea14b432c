#include "planner/cache_policy.hpp"

#include <sstream>

#include "planner/autodp.hpp"

namespace ep {

std::string to_string(CacheTier t) { return t == CacheTier::HostMemory ? "host" : "disk"; }

bool cache_writes_behind(const Config& c) { return c.device == DeviceKind::CUDA; }

bool cache_reads_ahead(const Config& c) { return cache_writes_behind(c); }  // both ride a GPU's side streams

bool cache_allowed(const Config& c) { return c.data.augment.empty(); }

CacheDecision decide_cache(const Config& c, const ModelSpec& spec, const CostModel& cost,
                           int frozen_layers, int micro_batch, const MeasuredCache* measured) {
  CacheDecision d;
  const SublayerRange prefix = ModelSpec::frozen_prefix(frozen_layers);
  if (prefix.empty()) {
    d.reason = "nothing frozen";
    return d;
  }
  if (!c.planner.autopipe) {
    d.reason = "needs AutoPipe (frozen layers stay inside stages)";
    return d;
  }
  if (!cache_allowed(c)) {
    d.reason = "data.augment: the frozen layers' outputs change every epoch";
    return d;
  }
  const double per_sample = spec.sublayers[prefix.last - 1].out_activation_bytes_per_sample;
  const SamplerSpec sampler{c.data.num_train_samples, c.cluster.nodes, c.training.seed};
  d.bytes_per_node = per_sample * static_cast<double>(shard_slots(sampler));
  d.tier = d.bytes_per_node <= c.cluster.host.memory_bytes ? CacheTier::HostMemory : CacheTier::Disk;
  d.read_s = cost.cache_read_s(per_sample * micro_batch, d.tier);
  d.frozen_forward_s = stage_frozen_forward_s(cost, spec, prefix, micro_batch);
  if (measured) {
    d.read_s = measured->read_s;
    d.frozen_forward_s = measured->frozen_forward_s;
  }
  std::ostringstream why;
  why.precision(3);
  why << (measured ? "measured: read " : "read ") << d.read_s * 1e3 << " ms (" << to_string(d.tier) << ") vs frozen forward "
      << d.frozen_forward_s * 1e3 << " ms per " << (measured ? "batch" : "micro-batch");
  switch (c.planner.cache) {
    case CachePolicyKind::Off: d.on = false; d.reason = "cache = off"; break;
    case CachePolicyKind::On: d.on = true; d.reason = "cache = on; " + why.str(); break;
    case CachePolicyKind::Auto:
      d.on = d.read_s < d.frozen_forward_s;
      d.reason = why.str();
      break;
  }
  return d;
}

std::optional<CacheTier> cache_file_ahead(const Config& c, const ModelSpec& spec, const CostModel& cost,
                                          bool steps_remain) {
  const int deepest = c.model.num_hidden_layers - c.planner.min_active_layers;
  if (!steps_remain || c.planner.freeze_policy == "none" || deepest < 1) return std::nullopt;
  const CacheDecision d = decide_cache(c, spec, cost, deepest, c.training.batch_size);
  if (!d.on) return std::nullopt;
  return d.tier;
}

namespace {

// The probe's batch rows in bytes at `frozen_layers`.
double probe_bytes(const ModelSpec& spec, int frozen_layers, int batch) {
  return spec.sublayers[ModelSpec::frozen_prefix(frozen_layers).last - 1].out_activation_bytes_per_sample * batch;
}

// The probe once set up, by its terms: the frozen forward and the read,
// each once untimed and kCacheProbeRuns times on the clock, and the write.
double probe_terms_s(const Config& c, const ModelSpec& spec, const CostModel& cost, int frozen_layers, int batch) {
  const CacheDecision d = decide_cache(c, spec, cost, frozen_layers, batch);
  return (1 + kCacheProbeRuns) * (d.read_s + d.frozen_forward_s) +
         cost.cache_write_s(probe_bytes(spec, frozen_layers, batch), d.tier);
}

}  // namespace

double predict_cache_probe_s(const Config& c, const ModelSpec& spec, const CostModel& cost, int frozen_layers,
                             int batch, bool first) {
  if (ModelSpec::frozen_prefix(frozen_layers).empty()) return 0;
  const double setup = first ? cost.cache_probe_setup_s(probe_bytes(spec, frozen_layers, batch)).value_or(0.0) : 0.0;
  double runs = probe_terms_s(c, spec, cost, frozen_layers, batch);
  // Where a profile timed whole probes: their time over their terms' at the
  // same depths and batches. On a GPU each timed run waits behind a spin of
  // 1.5 times the last run's queuing (exec/timing.hpp), which the terms,
  // the larger of queuing and device time, leave out.
  double measured = 0, terms = 0;
  for (const CacheProbeSample& p : cost.cache_probes())
    if (p.frozen_layers <= spec.num_layers()) {
      measured += p.seconds;
      terms += probe_terms_s(c, spec, cost, p.frozen_layers, p.samples);
    }
  if (measured > 0 && terms > 0) runs *= measured / terms;
  return setup + runs;
}

}  // namespace ep
