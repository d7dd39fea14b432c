#include "sim/request.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <utility>

#include "planner/error.hpp"
#include "sim/collectives.hpp"

namespace ep::sim {

namespace {

double checked(double v, const char* what, const Action& a) {
  if (!(v >= 0) || !std::isfinite(v))
    throw Error(std::string("simulator: ") + what + " of " + to_string(a) + " is " + std::to_string(v) +
                ", expected a finite value >= 0");
  return v;
}

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

// The replicas: one GPU per device each, no GPU twice, distinct ranks,
// the ring in rank order.
void place_replicas(Prepared& p, const SimRequest& q, int total_gpus) {
  const Schedule& s = q.schedule;
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
}

}  // namespace

Prepared prepare(const SimRequest& q, const Platform& platform) {
  const int total_gpus = static_cast<int>(platform.gpus.size());
  const Schedule& s = q.schedule;
  Prepared p;
  p.R = static_cast<int>(q.replica_gpus.size());
  p.K = s.K;
  p.iterations = q.iterations;
  p.replica_gpus = q.replica_gpus;
  p.cache_tier = q.cache_tier;
  p.cache_writes_behind = q.cache_writes_behind;
  p.cache_reads_ahead = q.cache_reads_ahead;
  p.plan_id = q.plan_id;
  if (q.iterations < 1) throw Error("simulator: iterations must be >= 1, found " + std::to_string(q.iterations));
  if (!q.costs.duration || !q.costs.bytes) throw Error("simulator: the request's IterationCosts lacks duration or bytes");
  if (p.R == 0) throw Error("simulator: no replica (replica_gpus is empty)");
  place_replicas(p, q, total_gpus);
  p.ring_n = p.R;
  p.collectives = q.collectives;
  const auto model = find_collective_model(q.collectives);
  if (!model) throw Error("simulator: no collective model \"" + printable(q.collectives) + "\"");
  if (model->two_nodes_stand_for_all() && !q.every_replica)
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
      if (a.kind == ActionKind::CacheRead || a.kind == ActionKind::CacheWrite)
        st.seconds = q.costs.alone ? checked(q.costs.alone(a), "alone", a) : 0.0;
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

}  // namespace ep::sim
