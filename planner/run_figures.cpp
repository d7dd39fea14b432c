#include "planner/run_figures.hpp"

#include <algorithm>
#include <limits>

namespace ep {

std::int64_t global_batch(const Plan& p) { return static_cast<std::int64_t>(p.batch) * p.layout.replicas; }

double flops_per_sample(const ModelSpec& spec, const Plan& p, int epoch) {
  return flops_per_sample(spec, p, p.cache_role(epoch) == CacheRole::Read);
}

double flops_per_sample(const ModelSpec& spec, const Plan& p, bool reads) {
  double flops = 0;
  for (int i = 0; i < spec.num_sublayers(); ++i) {
    const Sublayer& s = spec.sublayers[static_cast<std::size_t>(i)];
    if (i < p.partition.frozen_end)
      flops += reads ? 0.0 : s.fwd_flops_per_sample;
    else
      flops += s.fwd_flops_per_sample + (p.partition.trains(i) ? s.bwd_flops_per_sample : s.bwd_input_flops_per_sample);
  }
  return flops;
}

RunFigures run_figures(const ModelSpec& spec, const std::vector<Plan>& plans) {
  RunFigures f;
  f.global_batch_min = plans.empty() ? 0 : std::numeric_limits<std::int64_t>::max();
  for (const Plan& p : plans) {
    f.fits_memory = f.fits_memory && p.fits_memory;
    f.peak_memory_bytes = std::max(f.peak_memory_bytes, p.max_device_memory_bytes);
    f.updates += p.iterations_per_epoch * p.epochs();
    f.global_batch_min = std::min(f.global_batch_min, global_batch(p));
    f.global_batch_max = std::max(f.global_batch_max, global_batch(p));
    const double samples = static_cast<double>(p.iterations_per_epoch * global_batch(p));
    for (int e = p.first_epoch; e < p.end_epoch; ++e) f.flops += samples * flops_per_sample(spec, p, e);
  }
  return f;
}

double utilisation(double flops, double seconds, double peak_flops_per_s) {
  return seconds > 0 && peak_flops_per_s > 0 ? flops / (seconds * peak_flops_per_s) : 0.0;
}

double plan_utilisation(const ModelSpec& spec, const Plan& p, double peak_flops_per_s) {
  // iteration_s is the steady state's: reading the cache where it is on.
  return utilisation(static_cast<double>(global_batch(p)) * flops_per_sample(spec, p, p.cache.on), p.iteration_s,
                     peak_flops_per_s);
}

}  // namespace ep
