#include "sim/recorder.hpp"

#include <string>

namespace ep::sim {

namespace {

void put_track(ByteWriter& w, const trace::Track& k) { w.put_all(k.kind, k.node, k.index, k.name, k.lane); }

trace::Track get_track(ByteReader& r) {
  trace::Track k;
  r.get_into(k.kind, k.node, k.index, k.name, k.lane);
  return k;
}

}  // namespace

int Recorder::gpu_track(int gpu) {
  const int I = p_.gpus_per_node;
  return t_->track({trace::TrackKind::Gpu, gpu / I, gpu % I, "gpu" + std::to_string(gpu % I)});
}

void Recorder::on_links(const simgrid::s4u::Host* src, const simgrid::s4u::Host* dst, const trace::Event& e) {
  auto [it, fresh] = routes_.try_emplace({src, dst});
  if (fresh) {
    std::vector<simgrid::s4u::Link*> links;
    double latency = 0;
    src->route_to(dst, links, &latency);
    for (const simgrid::s4u::Link* l : links) {
      auto [lt, new_link] = link_track_.try_emplace(l, -1);
      if (new_link) lt->second = t_->track(p_.link_tracks.at(l));
      it->second.push_back(lt->second);
    }
  }
  for (const int track : it->second) {
    trace::Event c = e;
    c.track = track;
    c.flow_in = c.flow_out = 0;
    t_->events.push_back(std::move(c));
  }
}

void put_trace(ByteWriter& w, const trace::Trace& t) {
  w.put(t.tracks.size());
  for (const trace::Track& k : t.tracks) put_track(w, k);
  w.put(t.events.size());
  for (const trace::Event& e : t.events)
    w.put_all(e.track, e.name, e.category, e.start_s, e.end_s, e.stage, e.microbatch, e.bucket, e.replica,
              e.plan_id, e.iteration, e.bytes, e.flow_out, e.flow_in);
}

trace::Trace get_trace(ByteReader& r) {
  trace::Trace t;
  for (auto n = r.get<std::size_t>(); n > 0; --n) t.tracks.push_back(get_track(r));
  for (auto n = r.get<std::size_t>(); n > 0; --n) {
    trace::Event e;
    r.get_into(e.track, e.name, e.category, e.start_s, e.end_s, e.stage, e.microbatch, e.bucket, e.replica,
               e.plan_id, e.iteration, e.bytes, e.flow_out, e.flow_in);
    t.events.push_back(std::move(e));
  }
  return t;
}

}  // namespace ep::sim
