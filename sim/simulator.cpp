#include "sim/simulator.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <utility>

#include <simgrid/s4u.hpp>

#include "planner/error.hpp"
#include "sim/isolate.hpp"
#include "sim/platform.hpp"
#include "sim/recorder.hpp"
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

// Simulated sizes are whole bytes; below half a byte a transfer is free.
std::uint64_t whole_bytes(double b) { return static_cast<std::uint64_t>(std::llround(b)); }

double checked(double v, const char* what, const Action& a) {
  if (!(v >= 0) || !std::isfinite(v))
    throw Error(std::string("simulator: ") + what + " of " + to_string(a) + " is " + std::to_string(v) +
                ", expected a finite value >= 0");
  return v;
}

// ---------------------------------------------------------------- request

// One action of a device's list with what executing it needs, precomputed
// once per run so the actors do no lookups.
struct Step {
  Action a;
  double seconds = 0;       // F, B, FZ, OPT
  std::uint64_t bytes = 0;  // transfers, AR, CR, CW
  int slot = -1;            // send/recv: rendezvous slot of the tensor (direction, receiving stage, micro-batch)
  int peer = -1;            // recv: the sending device
  bool ends_stage_ar = false;  // AR: the last of its stage's buckets in this list
};

// A validated request, built in the parent so that errors surface there.
// Plain data: it is what the fork server's child is sent.
struct Prepared {
  int R = 0, K = 0, S = 0, M = 0, iterations = 1, slots = 0;
  int ring_n = 0;  // ranks of each all-reduce: R, or more when R replicas stand for all
  CollectiveModel collectives = CollectiveModel::Steps;
  std::vector<std::vector<Step>> lists;  // per device
  std::vector<std::vector<int>> lane;    // per device: indices of its all-reduces in `lists`
  std::vector<int> ranks;                // per replica
  std::vector<int> ring_pos;             // per replica: position in rank order
  std::vector<int> at_pos;               // ring position -> replica
  std::vector<std::vector<int>> replica_gpus;  // the request's
  CacheTier cache_tier = CacheTier::HostMemory;
  int plan_id = -1;
  int stage0_device = 0;  // the device hosting stage 0

  void put(ByteWriter& w) const {
    w.put_all(R, K, S, M, iterations, slots, ring_n, collectives, lists, lane, ranks, ring_pos, at_pos, replica_gpus,
              cache_tier, plan_id, stage0_device);
  }
  static Prepared get(ByteReader& r) {
    Prepared p;
    r.get_into(p.R, p.K, p.S, p.M, p.iterations, p.slots, p.ring_n, p.collectives, p.lists, p.lane, p.ranks,
               p.ring_pos, p.at_pos, p.replica_gpus, p.cache_tier, p.plan_id, p.stage0_device);
    return p;
  }
};

// Ring positions from ranks: at_pos[i] is the replica at position i.
void order_ring(Prepared& p) {
  p.at_pos.resize(p.R);
  std::iota(p.at_pos.begin(), p.at_pos.end(), 0);
  std::sort(p.at_pos.begin(), p.at_pos.end(), [&](int a, int b) { return p.ranks[a] < p.ranks[b]; });
  p.ring_pos.resize(p.R);
  for (int i = 0; i < p.R; ++i) p.ring_pos[p.at_pos[i]] = i;
}

// Keeps only the replicas of the ring's first two units when they stand
// for all (simulator.hpp). A unit is `alike_nodes` consecutive nodes (one
// node, or a leaf switch's nodes where hops across leaves differ): every
// replica within one node, every unit with the same GPUs in ring order,
// the ring entering each unit once.
void collapse_to_two_units(Prepared& p, int gpus_per_node, int alike_nodes) {
  const int unit_gpus = gpus_per_node * alike_nodes;
  const auto unit_of = [&](int r) { return p.replica_gpus[r].front() / unit_gpus; };
  for (int r = 0; r < p.R; ++r)
    for (const int g : p.replica_gpus[r])
      if (g / gpus_per_node != p.replica_gpus[r].front() / gpus_per_node) return;  // a replica across nodes
  std::map<int, std::vector<std::vector<int>>> local;  // unit -> its replicas' GPUs within it, in ring order
  int entries = 0;
  for (int i = 0; i < p.R; ++i) {
    const int r = p.at_pos[i];
    if (unit_of(r) != unit_of(p.at_pos[(i + p.R - 1) % p.R])) ++entries;
    std::vector<int> gpus;
    for (const int g : p.replica_gpus[r]) gpus.push_back(g % unit_gpus);
    local[unit_of(r)].push_back(std::move(gpus));
  }
  if (local.size() <= 2 || entries != static_cast<int>(local.size())) return;
  for (const auto& [unit, replicas] : local)
    if (replicas != local.begin()->second) return;
  const int first = unit_of(p.at_pos[0]);
  const int second = unit_of(p.at_pos[local.begin()->second.size()]);
  Prepared kept = p;
  kept.replica_gpus.clear();
  kept.ranks.clear();
  for (int i = 0; i < p.R; ++i) {
    const int r = p.at_pos[i];
    if (unit_of(r) != first && unit_of(r) != second) continue;
    kept.replica_gpus.push_back(p.replica_gpus[r]);
    kept.ranks.push_back(p.ranks[r]);
  }
  kept.R = static_cast<int>(kept.ranks.size());
  order_ring(kept);
  p = std::move(kept);
}

Prepared prepare(const SimRequest& q, const Platform& platform) {
  const int total_gpus = static_cast<int>(platform.gpus.size());
  const Schedule& s = q.schedule;
  Prepared p;
  p.R = static_cast<int>(q.replica_gpus.size());
  p.K = s.K;
  p.iterations = q.iterations;
  p.replica_gpus = q.replica_gpus;
  p.cache_tier = q.cache_tier;
  p.plan_id = q.plan_id;
  if (q.iterations < 1) throw Error("simulator: iterations must be >= 1, found " + std::to_string(q.iterations));
  if (!q.costs.duration || !q.costs.bytes) throw Error("simulator: the request's IterationCosts lacks duration or bytes");
  if (p.R == 0) throw Error("simulator: no replica (replica_gpus is empty)");
  std::vector<std::pair<int, int>> owner(total_gpus, {-1, -1});
  for (int r = 0; r < p.R; ++r) {
    const auto& gpus = q.replica_gpus[r];
    if (static_cast<int>(gpus.size()) != s.K)
      throw Error("simulator: the schedule has " + std::to_string(s.K) + " devices but replica " + std::to_string(r) +
                  " maps " + std::to_string(gpus.size()) + " GPUs (replica_gpus[" + std::to_string(r) +
                  "]); every replica needs exactly one GPU per device");
    for (int d = 0; d < s.K; ++d) {
      const int g = gpus[d];
      if (g < 0 || g >= total_gpus)
        throw Error("simulator: replica " + std::to_string(r) + " maps device " + std::to_string(d) + " to GPU " +
                    std::to_string(g) + ", outside the cluster's GPUs 0.." + std::to_string(total_gpus - 1));
      if (owner[g].first >= 0)
        throw Error("simulator: GPU " + std::to_string(g) + " is mapped twice: replica " +
                    std::to_string(owner[g].first) + " device " + std::to_string(owner[g].second) +
                    " and replica " + std::to_string(r) + " device " + std::to_string(d));
      owner[g] = {r, d};
    }
  }
  p.ranks = q.replica_rank;
  if (p.ranks.empty()) {
    p.ranks.resize(p.R);
    std::iota(p.ranks.begin(), p.ranks.end(), 0);
  }
  if (static_cast<int>(p.ranks.size()) != p.R)
    throw Error("simulator: " + std::to_string(p.ranks.size()) + " replica ranks for " + std::to_string(p.R) +
                " replicas");
  order_ring(p);
  for (int i = 1; i < p.R; ++i)
    if (p.ranks[p.at_pos[i]] == p.ranks[p.at_pos[i - 1]])
      throw Error("simulator: two replicas have rank " + std::to_string(p.ranks[p.at_pos[i]]));
  p.ring_n = p.R;
  p.collectives = q.collectives;
  if (p.collectives != CollectiveModel::Steps && !q.every_replica)
    collapse_to_two_units(p, platform.gpus_per_node, platform.alike_nodes);
  try {
    check_schedule(s);  // also guarantees every stage and micro-batch below is in range
  } catch (const Error& e) {
    throw e.with_context("simulator: invalid schedule");
  }

  p.S = s.num_stages();
  p.M = s.M;
  p.stage0_device = s.device_of(0);
  p.slots = 2 * p.S * p.M;
  const auto slot = [&](int dir, int recv_stage, int mb) { return (dir * p.S + recv_stage) * p.M + mb; };
  p.lists.resize(p.K);
  p.lane.resize(p.K);
  for (int d = 0; d < p.K; ++d) {
    std::vector<int> last_ar(p.S, -1);
    for (const Action& a : s.devices[d]) {
      Step st{a};
      const int i = static_cast<int>(p.lists[d].size());
      if (is_compute(a.kind)) {
        st.seconds = checked(q.costs.duration(a), "duration", a);
      } else {
        st.bytes = whole_bytes(checked(q.costs.bytes(a), "bytes", a));
      }
      switch (a.kind) {
        case ActionKind::SendAct: st.slot = slot(0, a.stage + 1, a.microbatch); break;
        case ActionKind::SendGrad: st.slot = slot(1, a.stage - 1, a.microbatch); break;
        case ActionKind::RecvAct:
          st.slot = slot(0, a.stage, a.microbatch);
          st.peer = s.device_of(a.stage - 1);
          break;
        case ActionKind::RecvGrad:
          st.slot = slot(1, a.stage, a.microbatch);
          st.peer = s.device_of(a.stage + 1);
          break;
        case ActionKind::AllReduce:
          p.lane[d].push_back(i);
          last_ar[a.stage] = i;
          break;
        default: break;
      }
      p.lists[d].push_back(st);
    }
    for (int i : last_ar)
      if (i >= 0) p.lists[d][i].ends_stage_ar = true;
  }
  return p;
}

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
  bool done = false, lane_done = true;
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
  std::vector<s4u::BarrierPtr> phase_end;  // phases: per device, its ring's ranks meet after each phase
  std::vector<RingPace> pace;              // phases, analytic: per device, its ring's slowest hop

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

void device_actor(Run& run, Worker& w) {
  const auto& list = run.p.lists[w.d];
  const int node = w.gpu / run.P.gpus_per_node;
  const bool disk = run.p.cache_tier == CacheTier::Disk;
  const int rank = run.p.ranks[w.r];
  for (int it = 0; it < run.p.iterations; ++it) {
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
          if (st.bytes > 0) {
            s4u::Host* from = read ? run.P.hosts[node] : w.host;
            s4u::Host* to = read ? w.host : run.P.hosts[node];
            if (read && disk) run.P.disks[node]->read(st.bytes);
            const double xfer = now();
            s4u::Comm::sendto(from, to, st.bytes);
            if (run.rec)
              run.rec.on_links(from, to, action_event(-1, a, xfer, now(), rank, run.p.plan_id, it,
                                                      static_cast<std::int64_t>(st.bytes)));
            if (!read && disk) run.P.disks[node]->write(st.bytes);
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
  w.done = true;
}

// The device's collective lane: its all-reduces in list order, each a ring
// over the replicas' same device (all replicas run the same schedule, so
// the device hosts the same stages everywhere), in rank order, moved as
// the request's CollectiveModel says (simulator.hpp).
void lane_actor(Run& run, Worker& w) {
  static int token;  // mailboxes refuse a null payload; the chunk's data is not simulated
  const int members = run.p.R;  // simulated ring members
  const int n = run.p.ring_n;   // ranks of the all-reduce
  const int pos = run.p.ring_pos[w.r];
  s4u::Mailbox* to_next = run.ring[w.d * members + (pos + 1) % members];
  s4u::Mailbox* mine = run.ring[w.d * members + pos];
  s4u::Host* prev = run.worker(run.p.at_pos[(pos + members - 1) % members], w.d).host;
  const RingPace pace = run.pace.empty() ? RingPace{} : run.pace[w.d];
  const auto& list = run.p.lists[w.d];
  const int rank = run.p.ranks[w.r];
  // One flow of `bytes` to the next rank while one arrives from the previous;
  // traced as "<what>" or "<what> <step>" (step >= 0), named only when traced.
  const auto exchange = [&](std::uint64_t bytes, const Action& a, int it, const char* what, int step) {
    const s4u::CommPtr out = to_next->put_async(&token, bytes);
    int* payload = nullptr;
    const s4u::CommPtr in = mine->get_async(&payload);
    in->wait();
    if (run.rec) {
      auto e =
          action_event(-1, a, in->get_start_time(), now(), rank, run.p.plan_id, it, static_cast<std::int64_t>(bytes));
      e.name += std::string(" ") + what;
      if (step >= 0) e.name += " " + std::to_string(step);
      run.rec.on_links(prev, w.host, e);
    }
    out->wait();
  };
  for (int it = 0; it < run.p.iterations; ++it) {
    for (const int i : run.p.lane[w.d]) {
      const Step& st = list[i];
      w.issued->acquire();
      const double start = now();
      const std::uint64_t chunk = n > 1 ? whole_bytes(static_cast<double>(st.bytes) / n) : 0;
      if (chunk > 0) {
        switch (run.p.collectives) {
          case CollectiveModel::Steps:
            for (int step = 0; step < 2 * (n - 1); ++step) exchange(chunk, st.a, it, "step", step);
            break;
          case CollectiveModel::Phases:
            for (const char* phase : {"reduce-scatter", "all-gather"}) {
              exchange(chunk * (n - 1), st.a, it, phase, -1);
              // A ring's step waits for its slowest link, so a phase ends
              // for all ranks when its slowest flow does.
              run.phase_end[w.d]->wait();
              s4u::this_actor::sleep_for((n - 2) * pace.latency);
            }
            break;
          case CollectiveModel::Analytic:
            s4u::this_actor::sleep_for(2.0 * (n - 1) * (pace.latency + static_cast<double>(chunk) / pace.bandwidth));
            break;
        }
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
  if (p.collectives != CollectiveModel::Steps) {  // the step model's flows find their own pace
    for (int d = 0; d < p.K; ++d) {
      std::vector<s4u::Host*> ring;
      for (const int r : p.at_pos) ring.push_back(run.worker(r, d).host);
      run.pace.push_back(ring_pace(ring));
      if (p.collectives == CollectiveModel::Phases) run.phase_end.push_back(s4u::Barrier::create(p.R));
    }
  }
  for (Worker& w : run.workers) {
    const std::string name = "r" + std::to_string(w.r) + ".d" + std::to_string(w.d);
    s4u::Actor::create(name, w.host, [&run, &w] { device_actor(run, w); });
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
    res.compute_s += w.compute;
    res.allreduce_s += w.allreduce;
    res.p2p_s += w.p2p;
    if (w.d == p.stage0_device) stage0_cache += w.cache_io;
  }
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
  w.put_all(res.compute_s, res.allreduce_s, res.p2p_s, res.cache_io_s);
}

SimResult get_result(ByteReader& r) {
  SimResult res;
  r.get_into(res.iteration_end_s, res.compute_s, res.allreduce_s, res.p2p_s, res.cache_io_s);
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
