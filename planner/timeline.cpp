// The timing engine: each device runs its list in order, an action starts
// when its device is free and its dependencies have ended (timeline.hpp).
#include "planner/timeline.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "planner/error.hpp"
#include "planner/schedule_error.hpp"

namespace ep {

namespace {

// Completion times of the actions others depend on, indexed densely by
// (slot, stage, micro-batch): the engine stays O(actions), no hashing.
enum Slot { kF, kB, kSendAct, kRecvAct, kSendGrad, kRecvGrad, kSlots };

std::optional<Slot> slot_of(ActionKind k) {
  switch (k) {
    case ActionKind::Forward: return kF;
    case ActionKind::Backward: return kB;
    case ActionKind::SendAct: return kSendAct;
    case ActionKind::RecvAct: return kRecvAct;
    case ActionKind::SendGrad: return kSendGrad;
    case ActionKind::RecvGrad: return kRecvGrad;
    default: return std::nullopt;
  }
}

// The completion keys an action waits on and the one it completes.
class DependencyKeys {
 public:
  explicit DependencyKeys(const Schedule& s) : s_(s), S_(s.num_stages()), M_(s.M) {}
  [[nodiscard]] std::size_t count() const { return static_cast<std::size_t>(kSlots) * S_ * M_; }
  [[nodiscard]] int key(Slot slot, int stage, int mb) const { return (slot * S_ + stage) * M_ + mb; }

  // Keys the action needs, -1 for none. An action out of range (the static
  // check says why) must not index the arrays.
  [[nodiscard]] std::pair<int, int> needs(const Action& a, int d, std::size_t i) const {
    const auto slot = slot_of(a.kind);
    const int st = a.stage;
    const int m = a.microbatch;
    const bool ok = st >= 0 && st < S_ &&
                    (!slot || (m >= 0 && m < M_ && !(a.kind == ActionKind::RecvAct && st == 0) &&
                               !(a.kind == ActionKind::RecvGrad && st + 1 == S_)));
    if (!ok) throw schedule_error(s_, to_string(a) + " out of range", {{d, i}});
    if (!slot) return {-1, -1};
    const bool prev_here = st > 0 && s_.device_of(st - 1) == s_.device_of(st);
    const bool next_here = st + 1 < S_ && s_.device_of(st + 1) == s_.device_of(st);
    switch (*slot) {
      case kF: return {st == 0 ? -1 : prev_here ? key(kF, st - 1, m) : key(kRecvAct, st, m), -1};
      case kB: return {key(kF, st, m), st + 1 == S_ ? -1 : next_here ? key(kB, st + 1, m) : key(kRecvGrad, st, m)};
      case kSendAct: return {key(kF, st, m), -1};
      case kSendGrad: return {key(kB, st, m), -1};
      case kRecvAct: return {key(kSendAct, st - 1, m), -1};
      case kRecvGrad: return {key(kSendGrad, st + 1, m), -1};
      case kSlots: break;
    }
    return {-1, -1};
  }

 private:
  const Schedule& s_;
  int S_, M_;
};

}  // namespace

double Timeline::bubble_fraction() const {
  return idle_share(compute_time, static_cast<double>(per_device.size()) * makespan);
}

DurationFn unit_cost(double t_f, double t_b, int v) {
  return [f = t_f / v, b = t_b / v](const Action& a) {
    return a.kind == ActionKind::Forward ? f : a.kind == ActionKind::Backward ? b : 0.0;
  };
}

// Devices advance through their lists; a device whose next action waits on
// a key parks on that key's waiter list and is woken when the key
// completes. Each action is started once and each wake-up re-tests one
// action, so the cost is O(actions + keys).
Timeline simulate(const Schedule& s, const DurationFn& duration) {
  const int K = s.K;
  const int S = s.num_stages();
  const int M = s.M;
  if (K < 1 || M < 1 || s.v < 1 || static_cast<int>(s.devices.size()) != K) {
    throw Error("simulate: schedule has K=" + std::to_string(K) + ", M=" + std::to_string(M) +
                ", v=" + std::to_string(s.v) + " and " + std::to_string(s.devices.size()) +
                " device rows");
  }
  const DependencyKeys keys(s);
  const std::size_t n_keys = keys.count();
  std::vector<double> done(n_keys, -1.0);   // end time; -1 while not done
  std::vector<int> waiters(n_keys, -1);      // head of a device list
  std::vector<int> next_waiter(K, -1);
  std::vector<double> allreduce_end(S, 0.0);
  std::vector<double> device_free(K, 0.0), collective_free(K, 0.0);
  std::vector<std::size_t> pc(K, 0);

  Timeline t;
  t.per_device.resize(K);
  for (int d = 0; d < K; ++d) t.per_device[d].resize(s.devices[d].size());

  std::vector<int> ready(K);
  for (int d = 0; d < K; ++d) ready[d] = K - 1 - d;
  while (!ready.empty()) {
    const int d = ready.back();
    ready.pop_back();
    const std::vector<Action>& list = s.devices[d];
    while (pc[d] < list.size()) {
      const std::size_t i = pc[d];
      const Action& a = list[i];
      const auto [k1, k2] = keys.needs(a, d, i);
      const int blocked = k1 >= 0 && done[k1] < 0 ? k1 : k2 >= 0 && done[k2] < 0 ? k2 : -1;
      if (blocked >= 0) {
        next_waiter[d] = waiters[blocked];
        waiters[blocked] = d;
        break;
      }
      const double dur = duration(a);
      if (!(dur >= 0) || !std::isfinite(dur)) {
        throw Error("simulate: duration of " + to_string(a) + " is " + std::to_string(dur));
      }
      double start = device_free[d];
      if (k1 >= 0) start = std::max(start, done[k1]);
      if (k2 >= 0) start = std::max(start, done[k2]);
      if (a.kind == ActionKind::AllReduce) start = std::max(start, collective_free[d]);
      if (a.kind == ActionKind::OptimizerStep) start = std::max(start, allreduce_end[a.stage]);
      const double end = start + dur;
      t.per_device[d][i] = {start, end};
      t.makespan = std::max(t.makespan, end);
      if (a.kind == ActionKind::AllReduce) {
        collective_free[d] = end;
        allreduce_end[a.stage] = std::max(allreduce_end[a.stage], end);
      } else {
        device_free[d] = end;
      }
      if (is_compute(a.kind)) t.compute_time += dur;
      if (const auto slot = slot_of(a.kind)) {
        const int k = keys.key(*slot, a.stage, a.microbatch);
        done[k] = end;
        for (int w = waiters[k]; w >= 0; w = next_waiter[w]) ready.push_back(w);
        waiters[k] = -1;
      }
      ++pc[d];
    }
  }
  std::vector<ScheduleStep> stuck;
  for (int d = 0; d < K; ++d) {
    if (pc[d] < s.devices[d].size()) stuck.push_back({d, pc[d]});
  }
  if (!stuck.empty()) throw schedule_error(s, "deadlock: no device can progress", stuck);
  return t;
}

std::string render_timeline(const Timeline& t, const Schedule& s, double slot) {
  const auto drawn = [&](int d, std::size_t i) {
    const ActionTiming& at = t.per_device[d][i];
    return at.end > at.start && s.devices[d][i].kind != ActionKind::AllReduce;
  };
  std::size_t width = 1;
  double shortest = 0;  // shortest F/B, the default slot
  for (int d = 0; d < s.K; ++d) {
    for (std::size_t i = 0; i < s.devices[d].size(); ++i) {
      if (!drawn(d, i)) continue;
      const Action& a = s.devices[d][i];
      width = std::max(width, to_string(a).size());
      const double len = t.per_device[d][i].end - t.per_device[d][i].start;
      if ((a.kind == ActionKind::Forward || a.kind == ActionKind::Backward) &&
          (shortest == 0 || len < shortest)) {
        shortest = len;
      }
    }
  }
  if (slot <= 0) slot = shortest;
  if (slot <= 0) return "";
  const auto slots = static_cast<std::size_t>(std::ceil(t.makespan / slot - 1e-9));
  std::string out;
  for (int d = 0; d < s.K; ++d) {
    std::string row = "dev " + std::to_string(d) + " |";
    std::size_t i = 0;
    std::size_t shown = s.devices[d].size();  // action in the previous slot
    for (std::size_t c = 0; c < slots; ++c) {
      const double mid = (static_cast<double>(c) + 0.5) * slot;
      while (i < s.devices[d].size() && (!drawn(d, i) || t.per_device[d][i].end <= mid)) ++i;
      std::string text;
      if (i < s.devices[d].size() && t.per_device[d][i].start <= mid) {
        text = i == shown ? std::string(width, '-') : to_string(s.devices[d][i]);
        shown = i;
      } else {
        text = std::string(width, '.');
      }
      row += ' ' + text + std::string(width - text.size(), ' ');
    }
    out += row + '\n';
  }
  return out;
}

}  // namespace ep
