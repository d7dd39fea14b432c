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

// A run's trace, sent back from the simulation process.
void put_trace(ByteWriter& w, const trace::Trace& t);
[[nodiscard]] trace::Trace get_trace(ByteReader& r);

}  // namespace ep::sim
