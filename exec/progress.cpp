#include "exec/progress.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "exec/trainer.hpp"
#include "exec/torch_compat.hpp"
#include "planner/stats.hpp"
#include "planner/timeline.hpp"
#include "traces/plan_epoch.hpp"

#if defined(ELASTICPIPE_CUDA) && EP_TORCH_2_8
#include <ATen/core/CachingHostAllocator.h>
#endif

namespace ep::exec {

void TracedMeasures::add(const IterationResult& r, int K) {
  if (r.records.empty()) return;
  double lo = r.records.front().start_s, hi = lo, busy = 0;
  for (const ActionRecord& rec : r.records) {
    lo = std::min(lo, rec.start_s);
    hi = std::max(hi, rec.end_s);
    if (is_compute(rec.action.kind)) busy += rec.end_s - rec.start_s;
  }
  std::vector<std::vector<std::pair<double, double>>> spans(K);
  for (const ActionRecord& rec : r.records)
    if (rec.action.kind == ActionKind::AllReduce && rec.device < K) spans[rec.device].push_back({rec.start_s, rec.end_s});
  for (auto& sp : spans) {
    std::sort(sp.begin(), sp.end());
    double end = -1e300, sum = 0;
    for (const auto& [a, b] : sp) {
      sum += std::max(0.0, b - std::max(a, end));
      end = std::max(end, b);
    }
    comm_s += sum / K;
  }
  compute_s += busy / K;
  bubble += idle_share(busy, K * (hi - lo));
  ++iterations;
}

bool WarmupMeter::add(double launch_s, double done_s, bool epoch_done, double& warmup_s) {
  if (!on_) return false;
  times_.push_back(done_s - std::max(launch_s, last_done_s_.value_or(launch_s)));
  last_done_s_ = done_s;
  if (times_.size() < 6 && !epoch_done) return false;
  const double first = times_.front();
  times_.erase(times_.begin());
  warmup_s = std::max(0.0, first - median(times_));
  on_ = false;
  return true;
}

trace::EpochMetrics epoch_metrics(const Plan& plan, const trace::RunState& p, const TracedMeasures& traced,
                                  double epoch_s, double transition_s, bool cache_filled, double accuracy) {
  trace::EpochMetrics m = trace::plan_epoch_row(plan, p.epoch, "exec", "train", epoch_s, transition_s, cache_filled);
  m.iteration_s = p.iteration ? epoch_s / static_cast<double>(p.iteration) : 0;
  m.samples_per_s = epoch_s > 0 ? static_cast<double>(p.epoch_real) / epoch_s : 0;
  m.bubble_fraction = traced.iterations ? traced.bubble / traced.iterations : 0;
  m.compute_s = traced.iterations ? traced.compute_s / traced.iterations : 0;
  m.comm_s = traced.iterations ? traced.comm_s / traced.iterations : 0;
  m.loss = p.epoch_real ? p.epoch_loss_sum / static_cast<double>(p.epoch_real) : 0;
  m.accuracy = accuracy;
  return m;
}

std::optional<PinnedAllocs> pinned_allocs_now() {
#if defined(ELASTICPIPE_CUDA) && EP_TORCH_2_8
  const at::HostStats s = at::getHostAllocator(at::kCUDA)->get_stats();
  return PinnedAllocs{s.num_host_alloc, static_cast<double>(s.host_alloc_time.total) * 1e-6,  // microseconds
                      static_cast<double>(s.allocated_bytes.allocated)};                      // made, ever
#else
  return std::nullopt;
#endif
}

std::optional<PinnedAllocs> pinned_allocs_since(const std::optional<PinnedAllocs>& before) {
  if (!before) return std::nullopt;
  const std::optional<PinnedAllocs> now = pinned_allocs_now();
  if (!now) return std::nullopt;
  return PinnedAllocs{now->blocks - before->blocks, now->alloc_s - before->alloc_s, now->bytes - before->bytes};
}

std::string format_pinned(const PinnedAllocs& p) {
  char b[96];
  char size[32] = "";
  if (p.blocks > 0) std::snprintf(size, sizeof size, " (%.1f MB)", p.bytes / (1 << 20));
  std::snprintf(b, sizeof b, "pinned memory: %lld new block%s%s, %.2f ms making them", static_cast<long long>(p.blocks),
                p.blocks == 1 ? "" : "s", size, p.alloc_s * 1e3);
  return b;
}

void HostPace::begin(const ActivationCache* c, bool gpu) {
  cache_at_start_ = c ? c->host_times() : ActivationCache::HostTimes{};
  pinned_at_start_ = gpu ? pinned_allocs_now() : std::nullopt;
}

void HostPace::end(const ActivationCache* c) {
  if (c) cache = since(cache_at_start_, c->host_times());
  pinned = pinned_allocs_since(pinned_at_start_);
}

ActivationCache::HostTimes HostPace::since(const ActivationCache::HostTimes& before,
                                           const ActivationCache::HostTimes& now) {
  ActivationCache::HostTimes d;
  d.reads = now.reads - before.reads;
  d.read_wait_s = now.read_wait_s - before.read_wait_s;
  d.read_copy_s = now.read_copy_s - before.read_copy_s;
  d.writes = now.writes - before.writes;
  d.write_queue_s = now.write_queue_s - before.write_queue_s;
  d.store_device_s = now.store_device_s - before.store_device_s;
  d.store_copy_s = now.store_copy_s - before.store_copy_s;
  d.flush_s = now.flush_s - before.flush_s;
  return d;
}

std::string format_host_pace(const HostPace& h) {
  const auto ms = [](double s) {
    char b[32];
    std::snprintf(b, sizeof b, "%.2f ms", s * 1e3);
    return std::string(b);
  };
  std::vector<double> intervals;
  for (std::size_t i = 1; i < h.done_s.size(); ++i) intervals.push_back(h.done_s[i] - h.done_s[i - 1]);
  std::string line = "  host: " + std::to_string(h.queue_s.size()) + " iterations, each queued in " +
                     (h.queue_s.empty() ? "-" : ms(median(h.queue_s))) + " and its results read every " +
                     (intervals.empty() ? "-" : ms(median(intervals))) + " (medians), the first's at " +
                     (h.done_s.empty() ? "-" : ms(h.done_s.front()));
  const ActivationCache::HostTimes& c = h.cache;
  const auto per = [&](double s, std::int64_t n) { return ms(n > 0 ? s / static_cast<double>(n) : 0.0); };
  if (c.reads > 0)
    line += "; cache: " + std::to_string(c.reads) + " reads, each " + per(c.read_copy_s, c.reads) +
            " copying rows after " + per(c.read_wait_s, c.reads) + " waiting for them";
  if (c.writes > 0)
    line += std::string(c.reads > 0 ? "; " : "; cache: ") + std::to_string(c.writes) + " writes, each held " +
            per(c.write_queue_s, c.writes) + " for a queue place, stored in " + per(c.store_copy_s, c.writes) +
            " after " + per(c.store_device_s, c.writes) + " bringing them off the device";
  if (c.reads > 0 || c.writes > 0) line += "; end-of-epoch flush " + ms(c.flush_s);
  if (h.pinned) line += "; " + format_pinned(*h.pinned);
  return line;
}

std::string format_epoch(const trace::EpochMetrics& m, int epochs, int L) {
  char buf[256];
  const std::string frozen = trace::frozen_text(m);
  std::snprintf(buf, sizeof buf, "epoch %d/%d  loss %.4f  acc %s  frozen %s/%d  K %d  M %d  %s%.0f samples/s%s",
                m.epoch + 1, epochs, m.loss,
                m.accuracy < 0 ? "n/a" : (std::to_string(std::round(m.accuracy * 10000) / 100).substr(0, 5) + "%").c_str(),
                frozen.c_str(), L, m.K, m.M, m.replicas > 1 ? ("x" + std::to_string(m.replicas) + "  ").c_str() : "",
                m.samples_per_s, m.cache ? "  cache" : "");
  return buf;
}

}  // namespace ep::exec
