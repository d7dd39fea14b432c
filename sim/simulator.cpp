#include "sim/simulator.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <optional>
#include <utility>

#include <simgrid/s4u.hpp>

#include "planner/cache_policy.hpp"
#include "planner/error.hpp"
#include "sim/collectives.hpp"
#include "sim/isolate.hpp"
#include "sim/platform.hpp"
#include "sim/recorder.hpp"
#include "sim/request.hpp"
#include "traces/action_event.hpp"

namespace ep::sim {
namespace s4u = simgrid::s4u;

namespace {

bool g_engine_created = false;  // SimGrid: one Engine per process, ever

double now() { return s4u::Engine::get_clock(); }

// The one place that waits on a set of comms: later SimGrid releases
// replace Comm::wait_all with ActivitySet.
void wait_all(const std::vector<s4u::CommPtr>& comms) { s4u::Comm::wait_all(comms); }

bool is_recv(ActionKind k) { return k == ActionKind::RecvAct || k == ActionKind::RecvGrad; }

// The one Action -> event helper, with what the simulator knows of a run.
trace::Event action_event(int track, const Action& a, double start, double end, int rank, int plan_id, int it,
                          std::int64_t bytes) {
  return trace::action_event(track, a, start, end,
                             {.replica = rank, .plan_id = plan_id, .iteration = it, .bytes = bytes});
}

// ---------------------------------------------------------------- run

// A ring's slowest hop, which paces every step: the largest route latency
// and the smallest link bandwidth between consecutive ranks.
struct RingPace {
  double latency = 0;
  double bandwidth = std::numeric_limits<double>::infinity();
};

RingPace ring_pace(const std::vector<s4u::Host*>& ring) {
  RingPace pace;
  for (std::size_t i = 0; i < ring.size(); ++i) {
    std::vector<s4u::Link*> links;
    double latency = 0;
    ring[i]->route_to(ring[(i + 1) % ring.size()], links, &latency);
    pace.latency = std::max(pace.latency, latency);
    for (const s4u::Link* l : links) pace.bandwidth = std::min(pace.bandwidth, l->get_bandwidth());
  }
  return pace;
}

struct Worker {  // one (replica, device)
  int r = 0, d = 0, gpu = 0, track = -1;
  s4u::Host* host = nullptr;
  s4u::SemaphorePtr issued;                   // compute -> lane: one release per all-reduce reached
  std::vector<s4u::SemaphorePtr> stage_done;  // per stage, lane -> OPT; null when no all-reduce here
  std::vector<double> end, lane_end;          // per iteration
  double compute = 0, allreduce = 0, p2p = 0, cache_io = 0;
  double drained = 0;  // its last cache write behind landed
  bool done = false, lane_done = true;
  // Cache writes stored behind the device, oldest first.
  struct Write {
    s4u::CommPtr comm;
    Action a;
    int it = 0;
    std::uint64_t bytes = 0;
  };
  std::deque<Write> writes;
  // Cache reads ahead: the device lets its reader start an iteration's
  // reads (one release per iteration begun, one ahead at the start); the
  // reader releases `read` once per CR landed. Null when not reading ahead.
  s4u::SemaphorePtr may_read, read;
};

struct Run {
  Run(const Platform& pl, const Prepared& pp, Recorder& rc) : P(pl), p(pp), rec(rc) {}
  const Platform& P;
  const Prepared& p;
  Recorder& rec;
  std::vector<Worker> workers;            // r * K + d
  std::vector<s4u::SemaphorePtr> posted;  // r * slots + slot: one release per SEND posted
  std::vector<int> send_event;            // trace: ((r * slots + slot) * iterations + it) -> SEND's event
  std::vector<s4u::Mailbox*> ring;        // d * R + ring position: that rank's incoming ring chunks
  std::shared_ptr<const CollectiveModel> collectives;  // the request's, moving every all-reduce
  std::vector<s4u::BarrierPtr> meet;           // per device: where its ring's ranks meet (RingRank::meet)
  std::vector<std::optional<RingPace>> pace;   // per device: its ring's slowest hop, once a model asks

  Worker& worker(int r, int d) { return workers[r * p.K + d]; }
};

void compute(const Run& run, const Worker& w, double seconds) {
  if (seconds <= 0) return;
  if (run.P.shared_cpus.empty()) {
    s4u::this_actor::execute(seconds * run.P.gpu_speed_flops);
    return;
  }
  // The node's shared cores: one core's speed at most, less when more
  // devices compute at once than there are cores.
  s4u::ExecPtr e = s4u::this_actor::exec_init(seconds * run.P.gpu_speed_flops);
  e->set_host(run.P.shared_cpus[w.gpu / run.P.gpus_per_node]);
  e->wait();
}

// The tier's end of a cache read or write from `w`'s GPU: host memory, or
// the disk behind it.
s4u::Host* cache_port(const Run& run, const Worker& w) {
  return (run.p.cache_tier == CacheTier::Disk ? run.P.disk_ports : run.P.host_ports)[w.gpu];
}

// Starts a cache read or write: its bytes between the GPU and the tier.
// The GPU's own host link, which only its cache IO crosses, runs that way
// at most at the rate the cost model gives the copy alone (st.seconds: a
// profile's measured copy, or the analytic tier and link bandwidth), so
// the writes queued behind a device share it as the one writer does; the
// node's memory link and disk are shared with its other GPUs. (SimGrid
// 3.32 ignores Comm::set_rate on a host-to-host comm.)
s4u::CommPtr start_cache_io(const Run& run, const Worker& w, const Step& st) {
  const bool read = st.a.kind == ActionKind::CacheRead;
  const Platform::HostLink& own = run.P.host_links[w.gpu];
  const double bw = run.P.host_link_bandwidth;
  (read ? own.read : own.write)->set_bandwidth(st.seconds > 0 ? std::min(bw, st.bytes / st.seconds) : bw);
  s4u::Host* port = cache_port(run, w);
  return s4u::Comm::sendto_async(read ? port : w.host, read ? w.host : port, st.bytes);
}

// Traces a cache copy, [start, end], on the links it crossed.
void trace_cache_io(Run& run, const Worker& w, const Action& a, double start, double end, int it, double bytes) {
  if (!run.rec) return;
  s4u::Host* port = cache_port(run, w);
  const bool read = a.kind == ActionKind::CacheRead;
  run.rec.on_links(read ? port : w.host, read ? w.host : port,
                   action_event(-1, a, start, end, run.p.ranks[w.r], run.p.plan_id, it,
                                static_cast<std::int64_t>(bytes)));
}

// Waits for the device's oldest write behind it to be stored.
void land_write(Run& run, Worker& w) {
  const Worker::Write& wr = w.writes.front();
  wr.comm->wait();
  trace_cache_io(run, w, wr.a, wr.comm->get_start_time(), wr.comm->get_finish_time(), wr.it, wr.bytes);
  w.writes.pop_front();
}

// The device's cache reads ahead of it, in list order (cache_reads_ahead).
void reader_actor(Run& run, Worker& w) {
  for (int it = 0; it < run.p.iterations; ++it) {
    w.may_read->acquire();
    for (const Step& st : run.p.lists[w.d]) {
      if (st.a.kind != ActionKind::CacheRead) continue;
      const double start = now();
      if (st.bytes > 0) {
        start_cache_io(run, w, st)->wait();
        trace_cache_io(run, w, st.a, start, now(), it, st.bytes);
      }
      w.read->release();
    }
  }
}

// Every action kind (planner/schedule.hpp, ActionKind) has its case, no
// default: a kind added there and not here stops the build, as in the
// executor's interpreter (exec/pipeline.cpp, DeviceRun::run).
#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wswitch"
void device_actor(Run& run, Worker& w) {
  const auto& list = run.p.lists[w.d];
  const int rank = run.p.ranks[w.r];
  for (int it = 0; it < run.p.iterations; ++it) {
    if (w.may_read) w.may_read->release();  // the reader may go on to the next iteration's reads
    for (const Step& st : list) {
      const Action& a = st.a;
      double start = now();
      switch (a.kind) {
        case ActionKind::OptimizerStep:
          if (const auto& done = w.stage_done[a.stage]) done->acquire();
          start = now();
          [[fallthrough]];
        case ActionKind::Forward:
        case ActionKind::Backward:
        case ActionKind::FrozenForward:
          compute(run, w, st.seconds);
          w.compute += st.seconds;
          break;
        case ActionKind::SendAct:
        case ActionKind::SendGrad: {
          const int slot = w.r * run.p.slots + st.slot;
          if (run.rec) {
            auto e = action_event(w.track, a, start, start, rank, run.p.plan_id, it, static_cast<std::int64_t>(st.bytes));
            e.flow_out = run.rec.new_flow();
            run.send_event[slot * run.p.iterations + it] = run.rec.add(std::move(e));
          }
          run.posted[slot]->release();
          continue;  // traced above; its end is set by the RECV
        }
        case ActionKind::RecvAct:
        case ActionKind::RecvGrad: {
          const int slot = w.r * run.p.slots + st.slot;
          run.posted[slot]->acquire();
          start = now();  // the rendezvous: the span is the transfer, the wait before it is idle
          s4u::Host* src = run.worker(w.r, st.peer).host;
          if (st.bytes > 0) s4u::Comm::sendto(src, w.host, st.bytes);
          w.p2p += now() - start;
          if (run.rec) {
            trace::Event& send = run.rec.at(run.send_event[slot * run.p.iterations + it]);
            send.end_s = now();
            auto e = action_event(w.track, a, start, now(), rank, run.p.plan_id, it, static_cast<std::int64_t>(st.bytes));
            e.flow_in = send.flow_out;
            if (st.bytes > 0) run.rec.on_links(src, w.host, e);
            run.rec.add(std::move(e));
          }
          continue;
        }
        case ActionKind::AllReduce:
          w.issued->release();
          continue;  // the lane runs and traces it
        case ActionKind::CacheRead:
        case ActionKind::CacheWrite: {
          const bool read = a.kind == ActionKind::CacheRead;
          if (read && w.read) {
            w.read->acquire();  // copied by the reader; the device waits only until it lands
          } else if (!read && run.p.cache_writes_behind) {
            // Queued: the device waits only for a free place in the writer's queue.
            while (static_cast<int>(w.writes.size()) >= kCacheWritesInFlight) land_write(run, w);
            if (st.bytes > 0) w.writes.push_back({start_cache_io(run, w, st), a, it, st.bytes});
          } else if (st.bytes > 0) {
            start_cache_io(run, w, st)->wait();
            trace_cache_io(run, w, a, start, now(), it, st.bytes);
          }
          w.cache_io += now() - start;
          break;
        }
      }
      if (run.rec) {
        const bool moves = a.kind == ActionKind::CacheRead || a.kind == ActionKind::CacheWrite;
        run.rec.add(action_event(w.track, a, start, now(), rank, run.p.plan_id, it,
                                 moves ? static_cast<std::int64_t>(st.bytes) : -1));
      }
    }
    w.end[it] = now();
  }
  // The writes still queued are stored after the last iteration: its end,
  // and so the steady state, leave out the epoch's last flush.
  while (!w.writes.empty()) land_write(run, w);
  w.drained = now();
  w.done = true;
}
#pragma GCC diagnostic pop

// One simulated rank of a device's ring, as collective models see it
// (collectives.hpp); the all-reduce it is moving is set per action.
class LaneRank final : public RingRank {
 public:
  LaneRank(Run& run, Worker& w) : run_(run), w_(w) {
    const int members = run.p.R;  // simulated ring members
    const int pos = run.p.ring_pos[w.r];
    to_next_ = run.ring[w.d * members + (pos + 1) % members];
    mine_ = run.ring[w.d * members + pos];
    prev_ = run.worker(run.p.at_pos[(pos + members - 1) % members], w.d).host;
  }
  void moving(const Action& a, int it) {
    a_ = &a;
    it_ = it;
  }

  int ranks() const override { return run_.p.ring_n; }
  void exchange(std::uint64_t bytes, const char* what, int step) override {
    static int token;  // mailboxes refuse a null payload; the chunk's data is not simulated
    const s4u::CommPtr out = to_next_->put_async(&token, bytes);
    int* payload = nullptr;
    const s4u::CommPtr in = mine_->get_async(&payload);
    in->wait();
    if (run_.rec) {
      auto e = action_event(-1, *a_, in->get_start_time(), now(), run_.p.ranks[w_.r], run_.p.plan_id, it_,
                            static_cast<std::int64_t>(bytes));
      e.name += std::string(" ") + what;
      if (step >= 0) e.name += " " + std::to_string(step);
      run_.rec.on_links(prev_, w_.host, e);
    }
    out->wait();
  }
  void meet() override { run_.meet[w_.d]->wait(); }
  void wait(double seconds) override { s4u::this_actor::sleep_for(seconds); }
  double latency() override { return pace().latency; }
  double bandwidth() override { return pace().bandwidth; }

 private:
  // Routes are looked up only for a model that asks: steps' flows find
  // their own pace.
  const RingPace& pace() {
    std::optional<RingPace>& p = run_.pace[w_.d];
    if (!p) {
      std::vector<s4u::Host*> ring;
      for (const int r : run_.p.at_pos) ring.push_back(run_.worker(r, w_.d).host);
      p = ring_pace(ring);
    }
    return *p;
  }

  Run& run_;
  Worker& w_;
  s4u::Mailbox* to_next_ = nullptr;
  s4u::Mailbox* mine_ = nullptr;
  s4u::Host* prev_ = nullptr;
  const Action* a_ = nullptr;
  int it_ = 0;
};

// The device's collective lane: its all-reduces in list order, each a ring
// over the replicas' same device (all replicas run the same schedule, so
// the device hosts the same stages everywhere), in rank order, moved by
// the request's collective model (collectives.hpp).
void lane_actor(Run& run, Worker& w) {
  const int n = run.p.ring_n;  // ranks of the all-reduce
  const auto& list = run.p.lists[w.d];
  const int rank = run.p.ranks[w.r];
  LaneRank ring(run, w);
  for (int it = 0; it < run.p.iterations; ++it) {
    for (const int i : run.p.lane[w.d]) {
      const Step& st = list[i];
      w.issued->acquire();
      const double start = now();
      const std::uint64_t chunk = n > 1 ? whole_bytes(static_cast<double>(st.bytes) / n) : 0;
      if (chunk > 0) {
        ring.moving(st.a, it);
        run.collectives->all_reduce(ring, chunk);
      }
      w.allreduce += now() - start;
      if (run.rec)
        run.rec.add(action_event(w.track, st.a, start, now(), rank, run.p.plan_id, it,
                                 static_cast<std::int64_t>(st.bytes)));
      if (st.ends_stage_ar) w.stage_done[st.a.stage]->release();
    }
    w.lane_end[it] = now();
  }
  w.lane_done = true;
}

SimResult simulate_request(const Platform& P, const Prepared& p, Recorder& rec) {
  Run run(P, p, rec);
  run.workers.resize(static_cast<std::size_t>(p.R) * p.K);
  run.posted.resize(static_cast<std::size_t>(p.R) * p.slots);
  if (rec) run.send_event.assign(run.posted.size() * p.iterations, -1);
  for (int r = 0; r < p.R; ++r) {
    for (int d = 0; d < p.K; ++d) {
      Worker& w = run.worker(r, d);
      w.r = r;
      w.d = d;
      w.gpu = p.replica_gpus[r][d];
      w.host = P.gpus[w.gpu];
      if (rec) w.track = rec.gpu_track(w.gpu);
      w.end.assign(p.iterations, 0);
      w.lane_end.assign(p.iterations, 0);
      w.stage_done.resize(p.S);
      for (const Step& st : p.lists[d]) {
        if (is_recv(st.a.kind)) run.posted[r * p.slots + st.slot] = s4u::Semaphore::create(0);
        if (st.ends_stage_ar) w.stage_done[st.a.stage] = s4u::Semaphore::create(0);
      }
    }
  }
  for (int d = 0; d < p.K; ++d)
    for (int pos = 0; pos < p.R; ++pos)
      run.ring.push_back(s4u::Mailbox::by_name("ring" + std::to_string(d) + "." + std::to_string(pos)));
  run.collectives = find_collective_model(p.collectives);
  if (!run.collectives)
    throw Error("simulator: no collective model \"" + p.collectives +
                "\" where the run forked (register it before the Simulator is built)");
  run.pace.resize(p.K);
  for (int d = 0; d < p.K; ++d) run.meet.push_back(s4u::Barrier::create(p.R));
  for (Worker& w : run.workers) {
    const std::string name = "r" + std::to_string(w.r) + ".d" + std::to_string(w.d);
    s4u::Actor::create(name, w.host, [&run, &w] { device_actor(run, w); });
    const auto& list = p.lists[w.d];
    if (p.cache_reads_ahead &&
        std::any_of(list.begin(), list.end(), [](const Step& st) { return st.a.kind == ActionKind::CacheRead; })) {
      w.may_read = s4u::Semaphore::create(1);  // the first iteration's reads at once
      w.read = s4u::Semaphore::create(0);
      s4u::Actor::create(name + ".reader", w.host, [&run, &w] { reader_actor(run, w); });
    }
    if (!p.lane[w.d].empty()) {
      w.issued = s4u::Semaphore::create(0);
      w.lane_done = false;
      s4u::Actor::create(name + ".lane", w.host, [&run, &w] { lane_actor(run, w); });
    }
  }
  s4u::Engine::get_instance()->run();

  SimResult res;
  res.iteration_end_s.assign(p.iterations, 0);
  double stage0_cache = 0;
  for (const Worker& w : run.workers) {
    if (!w.done || !w.lane_done)
      throw Error("simulator: replica " + std::to_string(w.r) + " device " + std::to_string(w.d) +
                  " did not finish (deadlock in the simulated run)");
    for (int it = 0; it < p.iterations; ++it)
      res.iteration_end_s[it] = std::max({res.iteration_end_s[it], w.end[it], w.lane_end[it]});
    res.drained_s = std::max(res.drained_s, w.drained);
    res.compute_s += w.compute;
    res.allreduce_s += w.allreduce;
    res.p2p_s += w.p2p;
    if (w.d == p.stage0_device) stage0_cache += w.cache_io;
  }
  if (!res.iteration_end_s.empty()) res.drained_s = std::max(res.drained_s, res.iteration_end_s.back());
  const double device_iterations = static_cast<double>(p.R) * p.K * p.iterations;
  res.compute_s /= device_iterations;
  res.allreduce_s /= device_iterations;
  res.p2p_s /= device_iterations;
  res.cache_io_s = stage0_cache / (static_cast<double>(p.R) * p.iterations);
  return res;
}

double simulate_transfers(const Platform& P, const std::vector<Simulator::Transfer>& transfers, Recorder& rec,
                          const std::string& label) {
  double last = 0;
  s4u::Actor::create("transfers", P.hosts[0], [&] {
    std::vector<s4u::CommPtr> comms;
    std::vector<const Simulator::Transfer*> started;
    for (const auto& t : transfers) {
      const std::uint64_t bytes = whole_bytes(t.bytes);
      if (bytes == 0 || t.src_gpu == t.dst_gpu) continue;
      comms.push_back(s4u::Comm::sendto_async(P.gpus[t.src_gpu], P.gpus[t.dst_gpu], bytes));
      started.push_back(&t);
    }
    wait_all(comms);
    for (std::size_t i = 0; i < comms.size(); ++i) {
      const double end = comms[i]->get_finish_time();
      last = std::max(last, end);
      if (!rec) continue;
      const Simulator::Transfer& t = *started[i];
      trace::Event e;
      e.track = rec.gpu_track(t.dst_gpu);
      e.name = label.empty() ? "transfer" : label;
      e.category = "transition";
      e.start_s = 0;
      e.end_s = end;
      e.bytes = static_cast<std::int64_t>(whole_bytes(t.bytes));
      rec.on_links(P.gpus[t.src_gpu], P.gpus[t.dst_gpu], e);
      rec.add(std::move(e));
    }
  });
  s4u::Engine::get_instance()->run();
  return last;
}

// What the fork server's child is sent: one iteration request or one set of
// transfers, and whether to trace it; what it sends back: the result, then
// (traced) the run's trace, which the caller appends to its own
// (trace::append renumbers its tracks and flow ids).
enum class JobKind : char { Iteration, Transfers };

void put_result(ByteWriter& w, const SimResult& res) {
  w.put(res.iteration_end_s);
  w.put_all(res.compute_s, res.allreduce_s, res.p2p_s, res.cache_io_s, res.drained_s);
}

SimResult get_result(ByteReader& r) {
  SimResult res;
  r.get_into(res.iteration_end_s, res.compute_s, res.allreduce_s, res.p2p_s, res.cache_io_s, res.drained_s);
  return res;
}

std::string iteration_job(const Prepared& p, bool traced) {
  ByteWriter w;
  w.put_all(JobKind::Iteration, traced);
  p.put(w);
  return w.bytes();
}

std::string transfers_job(const std::vector<Simulator::Transfer>& transfers, const std::string& label, bool traced) {
  ByteWriter w;
  w.put_all(JobKind::Transfers, traced, transfers, label);
  return w.bytes();
}

// In the fork server's child: run the job on the pristine engine.
void serve_job(const Platform& platform, const std::string& job, ByteWriter& w) {
  ByteReader r(job);
  const auto kind = r.get<JobKind>();
  const bool traced = r.get<bool>();
  trace::Trace t;
  Recorder rec(traced ? &t : nullptr, platform, 1);
  if (kind == JobKind::Iteration) {
    put_result(w, simulate_request(platform, Prepared::get(r), rec));
  } else {
    const auto transfers = r.get<std::vector<Simulator::Transfer>>();
    w.put(simulate_transfers(platform, transfers, rec, r.get<std::string>()));
  }
  if (traced) put_trace(w, t);
}

// The traced run's events appended to `trace` (a no-op without one).
void take_trace(ByteReader& r, trace::Trace* trace) {
  if (!trace) return;
  const std::size_t first = trace::append(*trace, get_trace(r), 0);
  trace::separate_overlaps(*trace, first);
}

}  // namespace

// ---------------------------------------------------------------- Simulator

struct Simulator::Impl {
  ClusterSpec cluster;
  std::unique_ptr<s4u::Engine> engine;
  Platform platform;
  std::unique_ptr<ForkServer> server;  // forked once the platform is built
};

Simulator::Simulator(const ClusterSpec& cluster) {
  check_cluster(cluster);  // before the engine: a bad spec must not use up the process's one engine
  if (g_engine_created)
    throw Error("simulator: a Simulator was already created in this process; SimGrid allows one engine per "
                "process, so reuse that Simulator (or run each platform in its own process)");
  g_engine_created = true;
  impl_ = std::make_unique<Impl>();
  impl_->cluster = cluster;
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer cannot follow SimGrid's default (raw) stack switching
  // between actors, but it follows swapcontext: a sanitizer build
  // (ELASTICPIPE_SANITIZE) switches with ucontext, chosen before the engine
  // starts.
  std::string args[] = {"elasticpipe-sim", "--log=xbt_cfg.thresh:warning", "--cfg=contexts/factory:ucontext"};
  char* argv[] = {args[0].data(), args[1].data(), args[2].data(), nullptr};
  int argc = 3;
  impl_->engine = std::make_unique<s4u::Engine>(&argc, argv);
#else
  // Actors' stacks: 128 KiB without guard pages instead of 8 MiB with them
  // (the actors' code is shallow). Every run is a fresh process that maps,
  // touches and unmaps them, so this is a cost per run; simulated times
  // do not depend on it.
  std::string args[] = {"elasticpipe-sim", "--log=xbt_cfg.thresh:warning", "--cfg=contexts/stack-size:128",
                        "--cfg=contexts/guard-size:0"};
  char* argv[] = {args[0].data(), args[1].data(), args[2].data(), args[3].data(), nullptr};
  int argc = 4;
  impl_->engine = std::make_unique<s4u::Engine>(&argc, argv);
#endif
  impl_->platform = build_platform(cluster);
  const Platform* platform = &impl_->platform;  // the server's copy of it
  impl_->server = std::make_unique<ForkServer>(
      [platform](const std::string& job, ByteWriter& out) { serve_job(*platform, job, out); });
}

Simulator::~Simulator() = default;

const ClusterSpec& Simulator::cluster() const { return impl_->cluster; }

SimResult Simulator::run(const SimRequest& q, trace::Trace* trace) {
  const Prepared p = prepare(q, impl_->platform);
  const std::string bytes = impl_->server->run({iteration_job(p, trace != nullptr)}, 1).front();
  ByteReader r(bytes);
  SimResult res = get_result(r);
  take_trace(r, trace);
  return res;
}

std::string Simulator::request_key(const SimRequest& q) const {
  Prepared p = prepare(q, impl_->platform);
  p.plan_id = -1;
  RequestKey key;
  p.put(key);
  return key.hex();
}

std::vector<SimResult> Simulator::run_batch(const std::vector<SimRequest>& requests, int jobs,
                                           std::vector<trace::Trace>* traces) {
  std::vector<std::string> batch;
  for (const SimRequest& q : requests)
    batch.push_back(iteration_job(prepare(q, impl_->platform), traces != nullptr));
  if (traces) traces->assign(requests.size(), trace::Trace{});
  std::vector<SimResult> results;
  const std::vector<std::string> outputs = impl_->server->run(batch, jobs);
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    ByteReader r(outputs[i]);
    results.push_back(get_result(r));
    take_trace(r, traces ? &(*traces)[i] : nullptr);
  }
  return results;
}

double Simulator::run_transfers(const std::vector<Transfer>& transfers, trace::Trace* trace,
                                const std::string& label) {
  const int total = static_cast<int>(impl_->platform.gpus.size());
  for (const Transfer& t : transfers) {
    if (t.src_gpu < 0 || t.src_gpu >= total || t.dst_gpu < 0 || t.dst_gpu >= total)
      throw Error("simulator: transfer GPU " + std::to_string(t.src_gpu) + " -> " + std::to_string(t.dst_gpu) +
                  " outside the cluster's GPUs 0.." + std::to_string(total - 1));
    if (!(t.bytes >= 0) || !std::isfinite(t.bytes))
      throw Error("simulator: transfer of " + std::to_string(t.bytes) + " bytes");
  }
  const std::string bytes = impl_->server->run({transfers_job(transfers, label, trace != nullptr)}, 1).front();
  ByteReader r(bytes);
  const auto seconds = r.get<double>();
  take_trace(r, trace);
  return seconds;
}

}  // namespace ep::sim
