// The two validation layers, the timing engine the dry run shares, and the
// text timeline.
#include <algorithm>
#include <cmath>
#include <optional>
#include <unordered_map>
#include <utility>

#include "planner/error.hpp"
#include "planner/schedule.hpp"

namespace ep {

namespace {

struct Step {
  int device;
  std::size_t index;
  friend bool operator==(const Step&, const Step&) = default;
};

// The schedule as aligned text rows, marked steps as `[[…]]`.
std::string grid(const Schedule& s, const std::vector<Step>& marks) {
  const auto cell = [&](int d, std::size_t i) {
    std::string text = to_string(s.devices[d][i]);
    const bool marked = std::find(marks.begin(), marks.end(), Step{d, i}) != marks.end();
    return marked ? "[[" + text + "]]" : text;
  };
  std::vector<std::size_t> width;
  for (std::size_t d = 0; d < s.devices.size(); ++d) {
    for (std::size_t i = 0; i < s.devices[d].size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], cell(static_cast<int>(d), i).size());
    }
  }
  std::string out;
  for (std::size_t d = 0; d < s.devices.size(); ++d) {
    std::string row = "dev " + std::to_string(d) + " |";
    for (std::size_t i = 0; i < s.devices[d].size(); ++i) {
      const std::string text = cell(static_cast<int>(d), i);
      row += ' ' + text + std::string(width[i] - text.size(), ' ');
    }
    while (row.ends_with(' ')) row.pop_back();
    out += row + '\n';
  }
  return out;
}

Error failure(const Schedule& s, const std::string& what, const std::vector<Step>& marks) {
  return Error("invalid schedule: " + what + "\n" + grid(s, marks));
}

bool has_microbatch(ActionKind k) {
  return k != ActionKind::AllReduce && k != ActionKind::OptimizerStep;
}

bool is_frozen_input(ActionKind k) {
  return k == ActionKind::FrozenForward || k == ActionKind::CacheRead ||
         k == ActionKind::CacheWrite;
}

class StaticCheck {
 public:
  explicit StaticCheck(const Schedule& s) : s_(s), S_(s.num_stages()) {}

  void run() {
    if (s_.K < 1 || s_.M < 1 || s_.v < 1 || static_cast<int>(s_.devices.size()) != s_.K) {
      throw Error("invalid schedule: K=" + std::to_string(s_.K) + " M=" + std::to_string(s_.M) +
                  " v=" + std::to_string(s_.v) + " with " + std::to_string(s_.devices.size()) +
                  " device rows");
    }
    for (int d = 0; d < s_.K; ++d) {
      for (std::size_t i = 0; i < s_.devices[d].size(); ++i) fields(d, i);
    }
    for (int st = 0; st < S_; ++st) {
      for (int m = 0; m < s_.M; ++m) dataflow(st, m);
    }
    frozen_input();
    reductions();
  }

 private:
  [[noreturn]] void fail(const std::string& what, std::vector<Step> marks) const {
    throw failure(s_, what, marks);
  }

  std::optional<Step> find(const Action& a) const {
    const auto it = where_.find(a);
    return it == where_.end() ? std::nullopt : std::optional<Step>(it->second);
  }

  // Marks the first of `candidates` present, so a missing action still
  // points at the step that needs it.
  std::vector<Step> mark_first(std::initializer_list<Action> candidates) const {
    for (const Action& a : candidates) {
      if (auto at = find(a)) return {*at};
    }
    return {};
  }

  // Fields in range for the kind, on the stage's device, not a duplicate.
  void fields(int d, std::size_t i) {
    const Action& a = s_.devices[d][i];
    const Step here{d, i};
    const std::string text = to_string(a);
    if (a.stage < 0 || a.stage >= S_) fail(text + ": no stage " + std::to_string(a.stage), {here});
    if (s_.device_of(a.stage) != d) {
      fail(text + ": stage " + std::to_string(a.stage) + " runs on device " +
               std::to_string(s_.device_of(a.stage)) + ", not " + std::to_string(d),
           {here});
    }
    const bool mb_ok = has_microbatch(a.kind) ? a.microbatch >= 0 && a.microbatch < s_.M
                                              : a.microbatch == -1;
    if (!mb_ok) fail(text + ": micro-batch out of range", {here});
    if ((a.kind == ActionKind::AllReduce) != (a.bucket >= 0) || a.bucket < -1) {
      fail(text + ": bad bucket", {here});
    }
    if (is_frozen_input(a.kind) && a.stage != 0) fail(text + ": frozen input of stage != 0", {here});
    if (is_transfer(a.kind)) {
      const bool towards_next = a.kind == ActionKind::SendAct || a.kind == ActionKind::RecvGrad;
      const int neighbour = towards_next ? a.stage + 1 : a.stage - 1;
      if (neighbour < 0 || neighbour >= S_) fail(text + ": no neighbouring stage", {here});
      const int peer = s_.device_of(neighbour);
      if (peer == d) fail(text + ": stages on the same device need no transfer", {here});
      if (a.peer_device != peer) {
        fail(text + ": peer device must be " + std::to_string(peer), {here});
      }
    } else if (a.peer_device != -1) {
      fail(text + ": peer device on a non-transfer", {here});
    }
    if (const auto [it, fresh] = where_.emplace(a, here); !fresh) {
      fail("duplicate " + text, {it->second, here});
    }
  }

  // Same-device order; an absent action is reported by its own check.
  void before(const Action& first, const Action& second) const {
    const auto a = find(first);
    const auto b = find(second);
    if (a && b && a->index > b->index) fail(to_string(second) + " before " + to_string(first), {*b});
  }

  // One F and one B with B after F; the transfers of each cross-device hop.
  void dataflow(int st, int m) const {
    const Action f = {ActionKind::Forward, st, m};
    const Action b = {ActionKind::Backward, st, m};
    if (!find(f)) fail("missing " + to_string(f), mark_first({b}));
    if (!find(b)) fail("missing " + to_string(b), mark_first({f}));
    before(f, b);
    if (st + 1 == S_ || s_.device_of(st + 1) == s_.device_of(st)) return;
    const int here = s_.device_of(st);
    const int next = s_.device_of(st + 1);
    const Action send_act = {ActionKind::SendAct, st, m, -1, next};
    const Action recv_act = {ActionKind::RecvAct, st + 1, m, -1, here};
    const Action send_grad = {ActionKind::SendGrad, st + 1, m, -1, here};
    const Action recv_grad = {ActionKind::RecvGrad, st, m, -1, next};
    const Action f_next = {ActionKind::Forward, st + 1, m};
    const Action b_next = {ActionKind::Backward, st + 1, m};
    if (!find(send_act)) fail("missing " + to_string(send_act), mark_first({recv_act, f}));
    if (!find(recv_act)) fail("missing " + to_string(recv_act), mark_first({send_act}));
    if (!find(send_grad)) fail("missing " + to_string(send_grad), mark_first({recv_grad, b_next}));
    if (!find(recv_grad)) fail("missing " + to_string(recv_grad), mark_first({send_grad}));
    before(f, send_act);
    before(recv_act, f_next);
    before(b_next, send_grad);
    before(recv_grad, b);
  }

  // Every micro-batch gets the same frozen input, before stage 0's F.
  void frozen_input() const {
    const auto present = [&](ActionKind k, int m) {
      return find({k, 0, m}).has_value();
    };
    for (int m = 0; m < s_.M; ++m) {
      const Action f0 = {ActionKind::Forward, 0, m};
      for (ActionKind k : {ActionKind::FrozenForward, ActionKind::CacheRead, ActionKind::CacheWrite}) {
        if (present(k, m) != present(k, 0)) {
          fail("micro-batches " + std::to_string(m) + " and 0 differ in " +
                   to_string(Action{k, 0, present(k, m) ? m : 0}),
               mark_first({{k, 0, m}, {k, 0, 0}}));
        }
        if (present(k, m)) before({k, 0, m}, f0);
      }
      const bool fz = present(ActionKind::FrozenForward, m);
      const bool cr = present(ActionKind::CacheRead, m);
      const bool cw = present(ActionKind::CacheWrite, m);
      if ((fz && cr && !cw) || (cw && !fz)) {
        fail("micro-batch " + std::to_string(m) + ": frozen input must be FZ, CR, FZ then CW, or CR, FZ, CW",
             mark_first({{ActionKind::CacheWrite, 0, m}, {ActionKind::CacheRead, 0, m}}));
      }
      if (cw) before({ActionKind::FrozenForward, 0, m}, {ActionKind::CacheWrite, 0, m});
      if (cr && fz) before({ActionKind::CacheRead, 0, m}, {ActionKind::FrozenForward, 0, m});
    }
  }

  // Buckets 0…n-1 after the stage's last B; an optimizer step for every
  // stage or none, after the stage's buckets.
  void reductions() const {
    std::vector<int> buckets(S_, 0);
    std::vector<std::size_t> last_b(S_, 0);
    std::vector<std::optional<Step>> opt(S_);
    for (const auto& [a, at] : where_) {
      if (a.kind == ActionKind::AllReduce) buckets[a.stage] = std::max(buckets[a.stage], a.bucket + 1);
      if (a.kind == ActionKind::Backward) last_b[a.stage] = std::max(last_b[a.stage], at.index);
      if (a.kind == ActionKind::OptimizerStep) opt[a.stage] = at;
    }
    for (int st = 0; st < S_; ++st) {
      std::size_t after = last_b[st];
      for (int b = 0; b < buckets[st]; ++b) {
        const Action ar = {ActionKind::AllReduce, st, -1, b};
        const auto at = find(ar);
        if (!at) fail("missing " + to_string(ar), mark_first({{ActionKind::AllReduce, st, -1, b + 1}}));
        if (at->index < last_b[st]) fail(to_string(ar) + " before the stage's last backward", {*at});
        after = std::max(after, at->index);
      }
      if (opt[st].has_value() != opt[0].has_value()) {
        fail("optimizer step on some stages only (stage " + std::to_string(st) + " vs 0)",
             {opt[st] ? *opt[st] : *opt[0]});
      }
      if (opt[st] && opt[st]->index < after) {
        fail(to_string(Action{ActionKind::OptimizerStep, st}) +
                 " before the stage's last backward or all-reduce",
             {*opt[st]});
      }
    }
  }

  const Schedule& s_;
  const int S_;
  std::unordered_map<Action, Step> where_;
};

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

}  // namespace

void check_schedule(const Schedule& s) {
  StaticCheck(s).run();
  // The dry run: only the order matters for deadlock, so any costs do.
  (void)simulate(s, [](const Action&) { return 1.0; });
}

double Timeline::bubble_fraction() const {
  const double capacity = static_cast<double>(per_device.size()) * makespan;
  return capacity > 0 ? 1.0 - compute_time / capacity : 0.0;
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
  const auto key = [&](Slot slot, int stage, int mb) -> int {
    return (slot * S + stage) * M + mb;
  };
  const std::size_t n_keys = static_cast<std::size_t>(kSlots) * S * M;
  std::vector<double> done(n_keys, -1.0);   // end time; -1 while not done
  std::vector<int> waiters(n_keys, -1);      // head of a device list
  std::vector<int> next_waiter(K, -1);
  std::vector<double> allreduce_end(S, 0.0);
  std::vector<double> device_free(K, 0.0), collective_free(K, 0.0);
  std::vector<std::size_t> pc(K, 0);

  Timeline t;
  t.per_device.resize(K);
  for (int d = 0; d < K; ++d) t.per_device[d].resize(s.devices[d].size());

  // Keys the action needs, -1 for none. An action out of range (the static
  // check says why) must not index the arrays.
  const auto needs = [&](const Action& a, int d, std::size_t i) -> std::pair<int, int> {
    const auto slot = slot_of(a.kind);
    const int st = a.stage;
    const int m = a.microbatch;
    const bool ok = st >= 0 && st < S &&
                    (!slot || (m >= 0 && m < M && !(a.kind == ActionKind::RecvAct && st == 0) &&
                               !(a.kind == ActionKind::RecvGrad && st + 1 == S)));
    if (!ok) throw failure(s, to_string(a) + " out of range", {{d, i}});
    if (!slot) return {-1, -1};
    const bool prev_here = st > 0 && s.device_of(st - 1) == s.device_of(st);
    const bool next_here = st + 1 < S && s.device_of(st + 1) == s.device_of(st);
    switch (*slot) {
      case kF:
        return {st == 0 ? -1 : prev_here ? key(kF, st - 1, m) : key(kRecvAct, st, m), -1};
      case kB:
        return {key(kF, st, m),
                st + 1 == S ? -1 : next_here ? key(kB, st + 1, m) : key(kRecvGrad, st, m)};
      case kSendAct: return {key(kF, st, m), -1};
      case kSendGrad: return {key(kB, st, m), -1};
      case kRecvAct: return {key(kSendAct, st - 1, m), -1};
      case kRecvGrad: return {key(kSendGrad, st + 1, m), -1};
      case kSlots: break;
    }
    return {-1, -1};
  };

  std::vector<int> ready(K);
  for (int d = 0; d < K; ++d) ready[d] = K - 1 - d;
  while (!ready.empty()) {
    const int d = ready.back();
    ready.pop_back();
    const std::vector<Action>& list = s.devices[d];
    while (pc[d] < list.size()) {
      const std::size_t i = pc[d];
      const Action& a = list[i];
      const auto [k1, k2] = needs(a, d, i);
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
      if (a.kind == ActionKind::Forward || a.kind == ActionKind::Backward) t.compute_time += dur;
      if (const auto slot = slot_of(a.kind)) {
        const int k = key(*slot, a.stage, a.microbatch);
        done[k] = end;
        for (int w = waiters[k]; w >= 0; w = next_waiter[w]) ready.push_back(w);
        waiters[k] = -1;
      }
      ++pc[d];
    }
  }
  std::vector<Step> stuck;
  for (int d = 0; d < K; ++d) {
    if (pc[d] < s.devices[d].size()) stuck.push_back({d, pc[d]});
  }
  if (!stuck.empty()) throw failure(s, "deadlock: no device can progress", stuck);
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
