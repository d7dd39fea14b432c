// Internal to sim/: a SimRequest validated and lowered into what the
// actors execute (simulator.cpp), one Step per action of each device's
// list. Built in the parent process, so that errors surface there, and
// sent to the fork server's child as plain data.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "planner/config.hpp"
#include "planner/cost_model.hpp"
#include "planner/digest.hpp"
#include "planner/schedule.hpp"
#include "sim/isolate.hpp"
#include "sim/platform.hpp"
#include "sim/simulator.hpp"

namespace ep::sim {

// Simulated sizes are whole bytes; below half a byte a transfer is free.
inline std::uint64_t whole_bytes(double b) { return static_cast<std::uint64_t>(std::llround(b)); }

// One action of a device's list with what executing it needs, precomputed
// once per run so the actors do no lookups.
struct Step {
  Action a;
  double seconds = 0;       // F, B, FZ, OPT; CR, CW: IterationCosts::alone (its rate bound; 0: none)
  std::uint64_t bytes = 0;  // transfers, AR, CR, CW
  int slot = -1;            // send/recv: rendezvous slot of the tensor (direction, receiving stage, micro-batch)
  int peer = -1;            // recv: the sending device
  bool ends_stage_ar = false;  // AR: the last of its stage's buckets in this list

  // Field by field, for a RequestKey (the ByteWriter copies a Step whole,
  // padding included).
  template <class W>
  void put(W& w) const {
    w.put_all(a.kind, a.stage, a.microbatch, a.bucket, a.peer_device, seconds, bytes, slot, peer, ends_stage_ar);
  }
};

// The key of a run: a Digest of the values a Prepared is sent to the
// child as, field by field, so two requests share it exactly when SimGrid
// would be given the same input. Nothing is listed by hand here: a field
// added to Prepared::put is in the key.
class RequestKey {
 public:
  template <class T>
  void put(const T& v) {
    if constexpr (requires { v.put(*this); }) {
      v.put(*this);
    } else if constexpr (requires { v.size(); v.begin(); }) {
      put(v.size());
      for (const auto& x : v) put(x);
    } else {
      static_assert(std::is_arithmetic_v<T> || std::is_enum_v<T>, "a key holds values, never padding");
      static_assert(sizeof(T) <= sizeof(std::uint64_t));
      std::uint64_t bits = 0;
      std::memcpy(&bits, &v, sizeof v);
      digest_.add(bits);
    }
  }
  template <class... T>
  void put_all(const T&... v) {
    (put(v), ...);
  }
  [[nodiscard]] std::string hex() const { return digest_.hex(); }

 private:
  Digest digest_;
};

// A validated request.
struct Prepared {
  int R = 0, K = 0, S = 0, M = 0, iterations = 1, slots = 0;
  int ring_n = 0;  // ranks of each all-reduce: R, or more when R replicas stand for all
  std::string collectives = "steps";  // the collective model's name (collectives.hpp)
  std::vector<std::vector<Step>> lists;  // per device
  std::vector<std::vector<int>> lane;    // per device: indices of its all-reduces in `lists`
  std::vector<int> ranks;                // per replica
  std::vector<int> ring_pos;             // per replica: position in rank order
  std::vector<int> at_pos;               // ring position -> replica
  std::vector<std::vector<int>> replica_gpus;  // the request's
  CacheTier cache_tier = CacheTier::HostMemory;
  bool cache_writes_behind = false;
  bool cache_reads_ahead = false;
  int plan_id = -1;
  int stage0_device = 0;  // the device hosting stage 0

  // To the child (a ByteWriter) and into a RequestKey: one list of fields.
  template <class W>
  void put(W& w) const {
    w.put_all(R, K, S, M, iterations, slots, ring_n, collectives, lists, lane, ranks, ring_pos, at_pos, replica_gpus,
              cache_tier, cache_writes_behind, cache_reads_ahead, plan_id, stage0_device);
  }
  static Prepared get(ByteReader& r) {
    Prepared p;
    r.get_into(p.R, p.K, p.S, p.M, p.iterations, p.slots, p.ring_n, p.collectives, p.lists, p.lane, p.ranks,
               p.ring_pos, p.at_pos, p.replica_gpus, p.cache_tier, p.cache_writes_behind, p.cache_reads_ahead, p.plan_id,
               p.stage0_device);
    return p;
  }
};

// Throws ep::Error for an invalid request (schedule, GPU map, ranks, costs).
[[nodiscard]] Prepared prepare(const SimRequest&, const Platform&);

}  // namespace ep::sim
