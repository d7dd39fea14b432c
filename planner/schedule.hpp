// Pipeline schedules as data, after torch.distributed.pipelining: an action
// is a tiny value with a text form that round-trips (`2F0`, `1SEND_F3>2`),
// a schedule is one ordered action list per device. Builders emit
// compute-only orders; `lower` adds the sends and receives from the
// stage→device map; back ends consume only the lowered form. Every schedule
// is validated in two layers (static check, then a dry run) and timed by
// `simulate` under a caller's cost function (the chunk search's predictor).
#pragma once

#include <cstddef>
#include <functional>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "planner/config.hpp"

namespace ep {

enum class ActionKind : unsigned char {
  Forward,        // sF m
  Backward,       // sB m
  SendAct,        // sSEND_F m>peer: stage s sends its output activation to stage s+1
  RecvAct,        // sRECV_F m<peer: stage s receives its input activation from stage s-1
  SendGrad,       // sSEND_B m>peer: stage s sends its input gradient to stage s-1
  RecvGrad,       // sRECV_B m<peer: stage s receives its output gradient from stage s+1
  AllReduce,      // sAR b: data-parallel all-reduce of bucket b of stage s's gradients
  OptimizerStep,  // sOPT
  FrozenForward,  // 0FZ m: F_frozen's forward of micro-batch m (stage 0's device)
  CacheRead,      // 0CR m: the frozen prefix's output read from the activation cache
  CacheWrite,     // 0CW m: ... written to it after a FrozenForward
};

// Fields that do not apply to a kind stay -1, so `==` and the hash need no
// per-kind logic. `stage` is the stage executing the action (for a transfer:
// the stage on this side of it).
struct Action {
  ActionKind kind = ActionKind::Forward;
  int stage = 0;
  int microbatch = -1;
  int bucket = -1;
  int peer_device = -1;  // send/recv: the device on the other side

  friend bool operator==(const Action&, const Action&) = default;
};

[[nodiscard]] bool is_transfer(ActionKind);
// Work a device computes: F, B, the frozen forward and the optimizer step.
[[nodiscard]] bool is_compute(ActionKind);
[[nodiscard]] std::string to_string(const Action&);
// Strict inverse of to_string; `>peer` / `<peer` is optional on transfers
// (torch's unlowered text). Throws ep::Error quoting the text.
[[nodiscard]] Action parse_action(std::string_view text);
std::ostream& operator<<(std::ostream&, const Action&);

// Stage s lives on device s % K (looping placement: with v chunks per
// device, device d holds stages d, d+K, d+2K, …; with v = 1 stage k is on
// device k).
struct Schedule {
  ScheduleKind kind = ScheduleKind::GPipe;
  int K = 1;  // devices
  int M = 1;  // micro-batches
  int v = 1;  // chunks (virtual stages) per device
  std::vector<std::vector<Action>> devices;  // per device, in execution order

  [[nodiscard]] int num_stages() const { return K * v; }
  [[nodiscard]] int device_of(int stage) const { return stage % K; }

  friend bool operator==(const Schedule&, const Schedule&) = default;
};

// "# schedule=<kind> K=<K> M=<M> v=<v>" then one row per device:
// "<device>,<action>,<action>,…". Two schedules diff as text.
[[nodiscard]] std::string to_csv(const Schedule&);
[[nodiscard]] Schedule parse_schedule_csv(std::string_view csv);
std::ostream& operator<<(std::ostream&, const Schedule&);  // the CSV

enum class FrozenInput {
  None,                  // no frozen prefix
  Forward,               // FZ m before stage 0's F m
  CacheRead,             // CR m before stage 0's F m
  ForwardAndCacheWrite,  // FZ m, CW m before stage 0's F m (first epoch with a cache)
  Advance,               // CR m, FZ m, CW m: a stale entry is read, run through the newly
                         // frozen layers once, and replaced (the boundary moved)
};

struct ScheduleOptions {
  ScheduleKind kind = ScheduleKind::GPipe;
  int K = 1;
  int M = 1;
  int v = 1;  // must be 1 for GPipe and 1F1B
  std::vector<int> buckets_per_stage;  // size K·v; empty = no AllReduce
  bool optimizer_step = false;         // one OptimizerStep per stage, at the end
  FrozenInput frozen_input = FrozenInput::None;
};

// Compute-only order (F, B, AllReduce, OptimizerStep, frozen input):
// - GPipe: all forwards (micro-batch 0…M-1), then all backwards (M-1…0).
// - 1F1B: device k warms up with K-1-k forwards, alternates F/B, cools down.
// - Looping breadth-first: chunk by chunk, every micro-batch of a chunk
//   before the next chunk; backwards in reverse chunk order.
// - Looping depth-first: interleaved 1F1B; see schedule_builders.cpp.
// A stage's all-reduce buckets follow its last backward (its gradients are
// final only then); OptimizerSteps end each device's list.
// Throws ep::Error on invalid options.
[[nodiscard]] Schedule build_compute_schedule(const ScheduleOptions&);
// Inserts RecvAct/RecvGrad right before the compute that consumes them and
// SendAct/SendGrad right after the compute that produces them, only where
// consecutive stages sit on different devices.
[[nodiscard]] Schedule lower(const Schedule&);
// lower(build_compute_schedule(options)): what back ends run.
[[nodiscard]] Schedule build_schedule(const ScheduleOptions&);

// Both layers; throws ep::Error whose text holds the device × step grid with
// the failing step(s) marked `[[…]]`.
// Static: actions on their stage's device, each (stage, micro-batch) with
// one F and one B (B after F), one matched send/recv pair per cross-device
// hop (right peer, recv before its consumer, send after its producer),
// frozen input consistent and before stage 0's F, all-reduce buckets 0…n-1
// once per stage after its last B, OptimizerStep for all stages or none,
// after the stage's last B and all-reduces.
// Dynamic: a dry run (simulate) that fails when no device can progress.
void check_schedule(const Schedule&);

}  // namespace ep

template <>
struct std::hash<ep::Action> {
  std::size_t operator()(const ep::Action& a) const noexcept;
};
