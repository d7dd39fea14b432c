// The two validation layers of a schedule: the static check of its lists,
// then a dry run of the timing engine (timeline.cpp) for deadlock.
#include <algorithm>
#include <cmath>
#include <optional>
#include <unordered_map>
#include <utility>

#include "planner/error.hpp"
#include "planner/schedule.hpp"
#include "planner/schedule_error.hpp"
#include "planner/timeline.hpp"

namespace ep {

namespace {

using Step = ScheduleStep;

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
    throw schedule_error(s_, what, marks);
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

}  // namespace

Error schedule_error(const Schedule& s, const std::string& what, const std::vector<ScheduleStep>& marks) {
  return Error("invalid schedule: " + what + "\n" + grid(s, marks));
}

void check_schedule(const Schedule& s) {
  StaticCheck(s).run();
  // The dry run: only the order matters for deadlock, so any costs do.
  (void)simulate(s, [](const Action&) { return 1.0; });
}

}  // namespace ep
