#include "traces/trace.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "traces/csv.hpp"

namespace ep::trace {

const char* action_category(ActionKind k) {
  switch (k) {
    case ActionKind::Forward: return "forward";
    case ActionKind::Backward: return "backward";
    case ActionKind::SendAct:
    case ActionKind::SendGrad: return "send";
    case ActionKind::RecvAct:
    case ActionKind::RecvGrad: return "recv";
    case ActionKind::AllReduce: return "allreduce";
    case ActionKind::OptimizerStep: return "optimizer";
    case ActionKind::FrozenForward: return "frozen_forward";
    case ActionKind::CacheRead: return "cache_read";
    case ActionKind::CacheWrite: return "cache_write";
  }
  return "";
}


int Trace::track(const Track& t) {
  const auto it = std::find(tracks.begin(), tracks.end(), t);
  if (it != tracks.end()) return static_cast<int>(it - tracks.begin());
  tracks.push_back(t);
  return static_cast<int>(tracks.size()) - 1;
}

namespace {

bool runs_on_device(const std::string& category) {
  for (const char* c : {"forward", "backward", "frozen_forward", "optimizer", "recv", "cache_read", "cache_write"})
    if (category == c) return true;
  return false;
}

}  // namespace

void separate_overlaps(Trace& t, std::size_t first) {
  std::map<int, std::vector<std::size_t>> by_track;
  for (std::size_t i = first; i < t.events.size(); ++i) by_track[t.events[i].track].push_back(i);
  for (auto& [track, events] : by_track) {
    // In start order, an enclosing span before the spans it holds.
    std::stable_sort(events.begin(), events.end(), [&](std::size_t a, std::size_t b) {
      const Event &x = t.events[a], &y = t.events[b];
      return x.start_s != y.start_s ? x.start_s < y.start_s : x.end_s > y.end_s;
    });
    const Track base = t.tracks[track];
    // On a GPU the device's own spans keep lane 0 (it runs them one at a
    // time); the rest start at lane 1. On a link every span may take lane 0.
    const bool gpu = base.kind == TrackKind::Gpu;
    // Per lane, the ends of its spans still open, outermost first: a span
    // fits a lane where it nests in the innermost (a transition's parts stay
    // on the transition's lane) or where none is open.
    std::vector<std::vector<double>> open;
    for (std::size_t i : events) {
      Event& e = t.events[i];
      if (gpu && runs_on_device(e.category)) continue;
      std::size_t lane = gpu ? 1 : 0;
      for (;; ++lane) {
        if (open.size() <= lane) open.resize(lane + 1);
        std::vector<double>& ends = open[lane];
        while (!ends.empty() && ends.back() <= e.start_s) ends.pop_back();  // closed: later spans start later
        if (ends.empty() || e.end_s <= ends.back()) break;
      }
      open[lane].push_back(e.end_s);
      if (lane == 0) continue;
      Track moved = base;
      moved.lane = static_cast<int>(lane);
      moved.name = base.name + " #" + std::to_string(lane);
      e.track = t.track(moved);
    }
  }
}

bool fits_trace(const Trace& t, double offset_s) {
  return std::all_of(t.events.begin(), t.events.end(), [&](const Event& e) {
    return std::abs(e.start_s + offset_s) <= kMaxTraceTimeS && std::abs(e.end_s + offset_s) <= kMaxTraceTimeS &&
           e.end_s - e.start_s <= kMaxTraceSpanS;
  });
}

void note_start(Trace& t, double start_s) {
  // To the microsecond, in the shortest text: "0.57953", not "0.579530",
  // which the metadata's writer would keep as a string, not a number.
  t.metadata[kStartKey] = csv::shortest(std::round(start_s * 1e6) / 1e6);
}

std::optional<double> start_of(const Trace& t) {
  const auto it = t.metadata.find(kStartKey);
  if (it == t.metadata.end()) return std::nullopt;
  return csv::number(it->second, "trace metadata '" + std::string(kStartKey) + "'");
}

std::string frozen_text(int frozen_layers, const std::string& inside) {
  if (inside == "-") return std::to_string(frozen_layers);
  return std::to_string(frozen_layers) + "+" + std::to_string(std::count(inside.begin(), inside.end(), ' ') + 1);
}

std::size_t append(Trace& into, const Trace& from, double offset_s) {
  std::int64_t top = 0;
  for (const Event& e : into.events) top = std::max({top, e.flow_out, e.flow_in});
  std::vector<int> track_of(from.tracks.size());
  for (std::size_t i = 0; i < from.tracks.size(); ++i) track_of[i] = into.track(from.tracks[i]);
  const std::size_t first = into.events.size();
  for (Event e : from.events) {
    e.track = track_of[e.track];
    e.start_s += offset_s;
    e.end_s += offset_s;
    if (e.flow_out > 0) e.flow_out += top;
    if (e.flow_in > 0) e.flow_in += top;
    into.events.push_back(std::move(e));
  }
  return first;
}

}  // namespace ep::trace
