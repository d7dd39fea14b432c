// Trace recording inside a simulation process (sim/simulator.cpp), and how
// what it recorded travels back to the Simulator's process. Internal to sim/.
#pragma once

#include <cstdint>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include <simgrid/s4u.hpp>

#include "sim/isolate.hpp"
#include "sim/platform.hpp"
#include "traces/trace.hpp"

namespace ep::sim {

// Records into a trace; no-op (false) without one.
class Recorder {
 public:
  Recorder(trace::Trace* t, const Platform& p, std::int64_t first_flow) : t_(t), p_(p), next_flow_(first_flow) {}
  explicit operator bool() const { return t_ != nullptr; }
  std::int64_t new_flow() { return next_flow_++; }

  int gpu_track(int gpu);
  int add(trace::Event e) {
    t_->events.push_back(std::move(e));
    return static_cast<int>(t_->events.size()) - 1;
  }
  trace::Event& at(int i) { return t_->events[i]; }

  // A copy of `e` on the track of every link of the route src -> dst.
  void on_links(const simgrid::s4u::Host* src, const simgrid::s4u::Host* dst, const trace::Event& e);

 private:
  trace::Trace* t_;
  const Platform& p_;
  std::int64_t next_flow_;
  std::map<std::pair<const simgrid::s4u::Host*, const simgrid::s4u::Host*>, std::vector<int>> routes_;
  std::unordered_map<const simgrid::s4u::Link*, int> link_track_;
};

// The trace a run appends to, as the simulation process needs it: whether
// there is one, its tracks so far (a run adds only new ones) and its first
// free flow id.
struct TraceContext {
  bool traced = false;
  std::vector<trace::Track> tracks;
  std::int64_t first_flow = 1;

  // Flow ids are unique within the trace they go into, and depend only on
  // it: the same runs into the same trace give the same ids.
  static TraceContext of(const trace::Trace* t);
  void put(ByteWriter& w) const;
  static TraceContext get(ByteReader& r);
};

// What the simulation process appended to `t` (tracks from tracks0, events
// from events0), sent back; get_trace_tail appends it to the caller's trace.
void put_trace_tail(ByteWriter& w, const trace::Trace& t, std::size_t tracks0, std::size_t events0);
void get_trace_tail(ByteReader& r, trace::Trace& t);

}  // namespace ep::sim
