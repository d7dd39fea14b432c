#include "planner/cost_model.hpp"

#include <algorithm>

namespace ep {

namespace {

// Bytes the optimizer step moves per parameter (FP32): weight read + write,
// gradient read, and each state tensor read + write.
double optimizer_traffic_bytes_per_param(const TrainingConfig& t) {
  const double states = t.optimizer == Optimizer::SGD ? (t.momentum != 0 ? 1 : 0) : 2;
  return 4 * (2 + 1 + 2 * states);
}

template <typename Time>
double sum_over(const ModelSpec& spec, SublayerRange r, Time time) {
  double sum = 0;
  for (int i = r.first; i < r.last; ++i) sum += time(spec.sublayers[i]);
  return sum;
}

}  // namespace

AnalyticCostModel::AnalyticCostModel(const ClusterSpec& cluster, const TrainingConfig& training)
    : cluster_(cluster), optimizer_bytes_per_param_(optimizer_traffic_bytes_per_param(training)) {}

double AnalyticCostModel::compute_s(double flops) const {
  const DeviceSpec& d = cluster_.device;
  return d.sublayer_overhead_s + flops / (d.peak_flops_per_s * d.efficiency);
}

const LinkSpec& AnalyticCostModel::link(LinkKind kind) const {
  return kind == LinkKind::IntraNode ? cluster_.intra_node : cluster_.inter_node;
}

double node_cache_bandwidth(const HostSpec& h, CacheTier tier) {
  return tier == CacheTier::HostMemory ? h.memory_bandwidth_bytes_per_s
                                       : std::min(h.disk_bandwidth_bytes_per_s, h.memory_bandwidth_bytes_per_s);
}

// Every copy also crosses the GPU's own link to host memory.
double AnalyticCostModel::cache_bandwidth(CacheTier tier) const {
  return std::min(node_cache_bandwidth(cluster_.host, tier), cluster_.gpu_host_link_bandwidth());
}

double AnalyticCostModel::forward_s(const Sublayer& s, int samples) const {
  return compute_s(s.fwd_flops_per_sample * samples);
}

double AnalyticCostModel::backward_s(const Sublayer& s, int samples) const {
  return compute_s(s.bwd_flops_per_sample * samples);
}

double AnalyticCostModel::backward_input_s(const Sublayer& s, int samples) const {
  return compute_s(s.bwd_input_flops_per_sample * samples);
}

double AnalyticCostModel::frozen_forward_s(const Sublayer& s, int samples) const {
  return forward_s(s, samples);
}

double AnalyticCostModel::p2p_s(double bytes, LinkKind kind) const {
  const LinkSpec& l = link(kind);
  return l.latency_s + bytes / l.bandwidth_bytes_per_s;
}

double AnalyticCostModel::allreduce_s(double bytes, int ranks, LinkKind slowest_link) const {
  if (ranks <= 1) return 0;
  const LinkSpec& l = link(slowest_link);
  const double n = ranks;
  return 2 * (n - 1) / n * bytes / l.bandwidth_bytes_per_s + 2 * (n - 1) * l.latency_s;
}

double AnalyticCostModel::cache_read_s(double bytes, CacheTier tier) const {
  return bytes / cache_bandwidth(tier);
}

double AnalyticCostModel::cache_write_s(double bytes, CacheTier tier) const {
  return bytes / cache_bandwidth(tier);
}

std::optional<double> AnalyticCostModel::cache_create_s(double bytes, CacheTier tier) const {
  // tmpfs zeroes each page as fallocate reserves it: about 5.5 GB/s on an
  // H100's host, bounded by the host's memory; a disk writes nothing.
  constexpr double kPageZeroBytesPerS = 5.5e9;
  if (tier != CacheTier::HostMemory) return 0.0;
  const double host = cluster_.host.memory_bandwidth_bytes_per_s;
  return bytes / (host > 0 ? std::min(kPageZeroBytesPerS, host) : kPageZeroBytesPerS);
}

double AnalyticCostModel::optimizer_step_s(double params) const {
  return params * optimizer_bytes_per_param_ / cluster_.device.memory_bandwidth_bytes_per_s;
}

double stage_forward_s(const CostModel& cost, const ModelSpec& spec, SublayerRange r, int samples) {
  return sum_over(spec, r, [&](const Sublayer& s) { return cost.forward_s(s, samples); });
}

double stage_forward_again_s(const CostModel& cost, const ModelSpec& spec, SublayerRange r, int samples) {
  return sum_over(spec, r, [&](const Sublayer& s) { return cost.forward_again_s(s, samples); });
}

double stage_backward_s(const CostModel& cost, const ModelSpec& spec, SublayerRange r, int samples) {
  return sum_over(spec, r, [&](const Sublayer& s) { return cost.backward_s(s, samples); });
}

double stage_frozen_forward_s(const CostModel& cost, const ModelSpec& spec, SublayerRange r,
                              int samples) {
  return sum_over(spec, r, [&](const Sublayer& s) { return cost.frozen_forward_s(s, samples); });
}

}  // namespace ep
