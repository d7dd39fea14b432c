// The simulated cluster: the only code that touches SimGrid's zone API.
//
// Topology (every link split-duplex: one SimGrid link per direction, so
// traffic one way never slows traffic the other way):
//
//   root star zone "cluster" ─┬─ nic<n> ── node zone "node<n>" (star, gateway router n<n>.sw)
//                             │               ├─ pcie<g> ── GPU host  n<n>.gpu<g>
//                             │               ├─ mem     ── CPU host  n<n>.host
//                             │               ├─ mem, hostlink<g> ── n<n>.host<g>: host memory
//                             │               │                      as GPU g reaches it (cache IO)
//                             │               └─ disk, mem, hostlink<g> ── n<n>.disk<g>: the disk
//                             │                                      as GPU g reaches it (cache IO)
//
// Latency split, so that the platform reproduces the cost model's formulas:
//   pcie<g>: intra_node bandwidth, intra_node.latency / 2 (the GPU's
//            link to the others: NVLink on DGX nodes, PCIe on the paper's)
//   nic<n>:  inter_node bandwidth, inter_node.latency / 2
//   mem:     host memory bandwidth, latency 0
//   hostlink<g>: the GPU's own link to host memory (host.gpu_link_bandwidth,
//            its PCIe x16), latency 0
//   disk:    host disk bandwidth, latency 0 (up: reads, down: writes);
//            a disk copy streams through memory at its slowest link's rate
// hence, for a transfer of S bytes alone on its route,
//   GPU → GPU, same node:   intra.latency + S / intra.bw                      (PCIe up, PCIe down)
//   GPU → GPU, other node:  intra.latency + inter.latency
//                           + S / min(intra.bw, inter.bw)                     (PCIe up, NIC, NIC, PCIe down)
//   host ↔ GPU (cache IO):  intra.latency / 2
//                           + S / min(mem.bw, hostlink.bw, intra.bw)          (mem, hostlink, pcie)
//   disk ↔ GPU (cache IO):  intra.latency / 2
//                           + S / min(disk.bw, mem.bw, hostlink.bw, intra.bw) (disk, mem, hostlink, pcie)
// (cache IO also crosses pcie<g>: on a PCIe node that is the same link,
// so it contends with the GPU's transfers; on NVLink nodes it stands for
// the GPU's side of the PCIe switch, too fast to bind.)
// The analytic cost model charges a cross-node hop inter.latency + S/inter.bw
// only; the simulator also pays the PCIe hops at both ends.
//
// With cluster.topology (nodes_per_switch < nodes) the nodes sit in leaf
// star zones "switch<s>" under the root, each leaf reaching the root over
// uplink<s> (its nodes' inter-node bandwidth / oversubscription,
// uplink_latency_s; trace track Track{Link, -1, 2(nodes + s) / +1,
// "uplink<s>.up/down"}) and, inside the leaf, through the leaf switch's
// fabric (its nodes' inter-node bandwidth, no latency: never tighter than
// the uplink). A node-to-node route across leaves is NIC, fabric, uplink,
// uplink, fabric, NIC; within a leaf NIC, NIC as in the flat layout.
//
// Star zones hold one route per element (up/down link lists), so the
// platform is O(nodes · GPUs): 32 nodes × 8 GPUs build in milliseconds.
#pragma once

#include <unordered_map>
#include <vector>

#include <simgrid/forward.h>

#include "planner/config.hpp"
#include "traces/trace.hpp"

namespace ep::sim {

struct Platform {
  int nodes = 0;
  int gpus_per_node = 0;
  double gpu_speed_flops = 0;               // peak_flops_per_s · efficiency
  std::vector<simgrid::s4u::Host*> gpus;    // global GPU id = node · gpus_per_node + gpu
  std::vector<simgrid::s4u::Host*> hosts;   // per node: CPU and memory, holds the activation cache
  std::vector<simgrid::s4u::Host*> host_ports;  // per global GPU: the node's memory as that GPU reaches it
  std::vector<simgrid::s4u::Host*> disk_ports;  // per global GPU: the node's disk (the cache's spill tier) as it reaches it
  // Per global GPU: its hostlink<g>, which only its cache IO crosses: up
  // carries its reads, down its writes.
  struct HostLink {
    simgrid::s4u::Link* read = nullptr;
    simgrid::s4u::Link* write = nullptr;
  };
  std::vector<HostLink> host_links;
  double host_link_bandwidth = 0;  // ClusterSpec::gpu_host_link_bandwidth()
  // Nodes that stand together for others in a coarse collective model
  // (simulator.hpp): 1 where every node-to-node hop is alike (flat, or
  // uplinks with no latency and at least a NIC's bandwidth), else a leaf
  // switch's nodes.
  int alike_nodes = 1;
  // With cluster.shared_cores: per node, one host of that many cores on
  // which all the node's devices compute (SimGrid shares its cores among
  // the executions running at once); empty otherwise.
  std::vector<simgrid::s4u::Host*> shared_cpus;
  // Every one-directional link and the trace track its traffic goes to:
  // Track{Link, node, 2g / 2g+1, "pcie<g>.up/down"}, Track{Link, node, 2I / 2I+1,
  // "host.up/down"} (up = leaving the host), Track{Link, node, 2I + 2 + 2g / +1,
  // "hostlink<g>.up/down"}, Track{Link, node, 4I + 2 / +1, "disk.up/down"}
  // (up = read) and Track{Link, -1, 2n / 2n+1, "ib<n>.up/down"}.
  std::unordered_map<const simgrid::s4u::Link*, trace::Track> link_tracks;
};

// Throws ep::Error for a cluster the platform cannot model: no node or GPU,
// a bandwidth or speed that is not positive and finite, a negative latency.
void check_cluster(const ClusterSpec&);

// Sets the network model (the one place calibration lives) and builds the
// zones. Needs a live s4u::Engine that has not built a platform yet; call
// once per process. Runs check_cluster first.
[[nodiscard]] Platform build_platform(const ClusterSpec&);

}  // namespace ep::sim
