#include "exec/progress.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "exec/trainer.hpp"
#include "planner/stats.hpp"
#include "planner/timeline.hpp"
#include "traces/plan_epoch.hpp"

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

std::string format_epoch(const trace::EpochMetrics& m, int epochs, int L) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "epoch %d/%d  loss %.4f  acc %s  frozen %d/%d  K %d  M %d  %s%.0f samples/s%s",
                m.epoch + 1, epochs, m.loss,
                m.accuracy < 0 ? "n/a" : (std::to_string(std::round(m.accuracy * 10000) / 100).substr(0, 5) + "%").c_str(),
                m.frozen_layers, L, m.K, m.M, m.replicas > 1 ? ("x" + std::to_string(m.replicas) + "  ").c_str() : "",
                m.samples_per_s, m.cache ? "  cache" : "");
  return buf;
}

}  // namespace ep::exec
