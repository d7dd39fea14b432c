// Compute-only schedule builders. Device d holds stages d, d+K, …, d+(v-1)K:
// its chunk c is stage c·K + d.
#include <algorithm>

#include "planner/error.hpp"
#include "planner/schedule.hpp"

namespace ep {

namespace {

using Order = std::vector<std::vector<Action>>;  // per device

Action forward(int stage, int mb) { return {ActionKind::Forward, stage, mb}; }
Action backward(int stage, int mb) { return {ActionKind::Backward, stage, mb}; }

// GPipe is the v = 1 case. Backwards run micro-batch M-1 first: it is the
// one whose forward just finished (GPipe's picture; torch's ScheduleLoopedBFS).
Order breadth_first(int K, int M, int v) {
  Order order(K);
  for (int d = 0; d < K; ++d) {
    for (int c = 0; c < v; ++c) {
      for (int m = 0; m < M; ++m) order[d].push_back(forward(c * K + d, m));
    }
    for (int c = v - 1; c >= 0; --c) {
      for (int m = M - 1; m >= 0; --m) order[d].push_back(backward(c * K + d, m));
    }
  }
  return order;
}

// Micro-batches per round of the depth-first order: max(1, M / K) rounds,
// sizes as equal as possible, larger rounds first.
std::vector<int> rounds(int K, int M) {
  const int n = std::max(1, M / K);
  std::vector<int> sizes(n, M / n);
  for (int r = 0; r < M % n; ++r) ++sizes[r];
  return sizes;
}

// Device d's forwards (or backwards) in depth-first order: a round of
// micro-batches goes through all chunks before the next round starts, chunk
// 0 first for forwards, chunk v-1 first for backwards. With v = 1 this is
// micro-batch order.
std::vector<Action> depth_first_sequence(int d, int K, int v, const std::vector<int>& sizes,
                                         bool backwards) {
  std::vector<Action> seq;
  int first = 0;
  for (int size : sizes) {
    for (int i = 0; i < v; ++i) {
      const int stage = (backwards ? v - 1 - i : i) * K + d;
      for (int m = first; m < first + size; ++m) {
        seq.push_back(backwards ? backward(stage, m) : forward(stage, m));
      }
    }
    first += size;
  }
  return seq;
}

// 1F1B skeleton: `warmup(d)` forwards, then one forward and one backward
// alternately, then the remaining backwards.
template <typename Warmup>
Order one_f_one_b(int K, int M, int v, Warmup warmup) {
  const std::vector<int> sizes = rounds(K, M);
  Order order(K);
  for (int d = 0; d < K; ++d) {
    const std::vector<Action> fwd = depth_first_sequence(d, K, v, sizes, false);
    const std::vector<Action> bwd = depth_first_sequence(d, K, v, sizes, true);
    const auto n = static_cast<int>(fwd.size());
    const int w = std::min(n, warmup(d, sizes[0]));
    std::vector<Action>& list = order[d];
    list.insert(list.end(), fwd.begin(), fwd.begin() + w);
    for (int i = 0; i + w < n; ++i) {
      list.push_back(fwd[w + i]);
      list.push_back(bwd[i]);
    }
    list.insert(list.end(), bwd.begin() + (n - w), bwd.end());
  }
  return order;
}

void add_frozen_input(std::vector<Action>& device0, FrozenInput input) {
  if (input == FrozenInput::None) return;
  std::vector<Action> out;
  for (const Action& a : device0) {
    if (a.kind == ActionKind::Forward && a.stage == 0) {
      const int m = a.microbatch;
      const bool read = input == FrozenInput::CacheRead || input == FrozenInput::Advance;
      const bool forward = input != FrozenInput::CacheRead;
      const bool write = input == FrozenInput::ForwardAndCacheWrite || input == FrozenInput::Advance;
      if (read) out.push_back({ActionKind::CacheRead, 0, m});
      if (forward) out.push_back({ActionKind::FrozenForward, 0, m});
      if (write) out.push_back({ActionKind::CacheWrite, 0, m});
    }
    out.push_back(a);
  }
  device0 = std::move(out);
}

// Buckets right after the stage's last backward: DDP launches a bucket as
// soon as its gradients are final, i.e. after the last micro-batch.
void add_allreduce(std::vector<Action>& list, const std::vector<int>& buckets_per_stage) {
  std::vector<std::size_t> remaining(buckets_per_stage.size(), 0);
  for (const Action& a : list) {
    if (a.kind == ActionKind::Backward) ++remaining[a.stage];
  }
  std::vector<Action> out;
  for (const Action& a : list) {
    out.push_back(a);
    if (a.kind == ActionKind::Backward && --remaining[a.stage] == 0) {
      for (int b = 0; b < buckets_per_stage[a.stage]; ++b) {
        out.push_back({ActionKind::AllReduce, a.stage, -1, b});
      }
    }
  }
  list = std::move(out);
}

void validate(const ScheduleOptions& o) {
  const auto fail = [](const std::string& msg) { return Error("schedule options: " + msg); };
  if (o.K < 1) throw fail("K must be >= 1, got " + std::to_string(o.K));
  if (o.M < 1) throw fail("M must be >= 1, got " + std::to_string(o.M));
  if (o.v < 1) throw fail("v must be >= 1, got " + std::to_string(o.v));
  const bool looping = o.kind == ScheduleKind::LoopingBreadthFirst ||
                       o.kind == ScheduleKind::LoopingDepthFirst;
  if (!looping && o.v != 1) {
    throw fail("v = " + std::to_string(o.v) + " needs a looping schedule, " + to_string(o.kind) +
               " has one chunk per device");
  }
  if (!o.buckets_per_stage.empty()) {
    if (static_cast<int>(o.buckets_per_stage.size()) != o.K * o.v) {
      throw fail("buckets_per_stage has " + std::to_string(o.buckets_per_stage.size()) +
                 " entries, expected K*v = " + std::to_string(o.K * o.v));
    }
    if (std::any_of(o.buckets_per_stage.begin(), o.buckets_per_stage.end(),
                    [](int n) { return n < 0; })) {
      throw fail("buckets_per_stage has a negative entry");
    }
  }
}

}  // namespace

// Looping depth-first is interleaved 1F1B (Narayanan et al. 2021), with
// Megatron's order generalised to any M: micro-batches in max(1, M / K)
// rounds of near-equal size (larger first, so each round has ≥ K
// micro-batches when M ≥ K and none outgrows the first: the chunk hand-over
// inside a round never stalls and device K-1 never needs a forward it has
// not yet run). Device d warms up with (v-1)·(first round) + 2·(K-1-d)
// forwards, then alternates F and B (Megatron's count: the factor 2 leaves
// room to hide stage-to-stage transfers; K-1-d suffices under zero
// transfer cost). When K divides M this is Megatron's and torch's
// Interleaved1F1B order. Under unit costs its bubble is GPipe's / v for
// every M ≥ K, and at most GPipe's for M < K: the tests check it, with a
// dry run, for every K ≤ 8, M ≤ 6K, v ≤ 4 (not proved in general).
Schedule build_compute_schedule(const ScheduleOptions& o) {
  validate(o);
  Schedule s{o.kind, o.K, o.M, o.v, {}};
  switch (o.kind) {
    case ScheduleKind::GPipe:
    case ScheduleKind::LoopingBreadthFirst:
      s.devices = breadth_first(o.K, o.M, o.v);
      break;
    case ScheduleKind::OneFOneB:
      s.devices = one_f_one_b(o.K, o.M, 1, [&](int d, int) { return o.K - 1 - d; });
      break;
    case ScheduleKind::LoopingDepthFirst:
      s.devices = one_f_one_b(o.K, o.M, o.v,
                              [&](int d, int round) { return (o.v - 1) * round + 2 * (o.K - 1 - d); });
      break;
  }
  add_frozen_input(s.devices[0], o.frozen_input);
  for (int d = 0; d < o.K; ++d) {
    if (!o.buckets_per_stage.empty()) add_allreduce(s.devices[d], o.buckets_per_stage);
    if (o.optimizer_step) {
      for (int c = 0; c < o.v; ++c) s.devices[d].push_back({ActionKind::OptimizerStep, c * o.K + d});
    }
  }
  return s;
}

Schedule build_schedule(const ScheduleOptions& o) { return lower(build_compute_schedule(o)); }

}  // namespace ep
