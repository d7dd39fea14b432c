#include "sim/platform.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include <simgrid/s4u.hpp>
#include <xbt/log.h>

#include "planner/error.hpp"

namespace ep::sim {
namespace s4u = simgrid::s4u;

namespace {

void require_rate(double v, const std::string& what) {
  if (!(v > 0) || !std::isfinite(v))
    throw Error("simulator platform: " + what + " must be positive and finite, found " + std::to_string(v));
}

void require_latency(double v, const std::string& what) {
  if (!(v >= 0) || !std::isfinite(v))
    throw Error("simulator platform: " + what + " must be >= 0 and finite, found " + std::to_string(v));
}

// Calibration, all of it. The platform's links carry the config's numbers
// unchanged, and the network model must not rescale them:
// - CM02 has no correction factors (latency and bandwidth factors 1); the
//   default LV08 multiplies every latency by 13.01 (TCP slow start) and
//   bandwidth by 0.97, which would make a 5 µs PCIe hop cost 65 µs.
// - crosstraffic off: with it on, every flow also loads the reverse
//   route with 5% of its rate (TCP acks), which GPU interconnects do not have.
// - TCP-gamma 0: no window bound (gamma / 2·latency) on a flow's rate.
// CM02 still shares a link between flows in inverse proportion to their
// route latency (TCP's RTT unfairness): a cross-node flow gets less of a
// shared PCIe link than an intra-node one. Equal-latency flows (the
// analytic anchors) share equally.
void calibrate() {
  xbt_log_control_set("xbt_cfg.thresh:warning");  // no "Configuration change" lines
  s4u::Engine::set_config("network/model:CM02");
  s4u::Engine::set_config("network/crosstraffic:0");
  s4u::Engine::set_config("network/TCP-gamma:0");
}

}  // namespace

void check_cluster(const ClusterSpec& c) {
  if (c.nodes < 1 || c.gpus_per_node < 1)
    throw Error("simulator platform: needs at least 1 node and 1 GPU per node, found " +
                std::to_string(c.nodes) + " x " + std::to_string(c.gpus_per_node));
  require_rate(c.device.peak_flops_per_s * c.device.efficiency, "device.peak_flops_per_s * efficiency");
  require_rate(c.intra_node.bandwidth_bytes_per_s, "intra_node.bandwidth_bytes_per_s");
  require_rate(c.inter_node.bandwidth_bytes_per_s, "inter_node.bandwidth_bytes_per_s");
  require_rate(c.host.memory_bandwidth_bytes_per_s, "host.memory_bandwidth_bytes_per_s");
  require_rate(c.host.disk_bandwidth_bytes_per_s, "host.disk_bandwidth_bytes_per_s");
  require_rate(c.gpu_host_link_bandwidth(), "host.gpu_link_bandwidth_bytes_per_s");
  require_latency(c.intra_node.latency_s, "intra_node.latency_s");
  require_latency(c.inter_node.latency_s, "inter_node.latency_s");
}

namespace {

constexpr auto kUp = s4u::LinkInRoute::Direction::UP;

// One split-duplex link, its two directions registered as trace tracks.
s4u::SplitDuplexLink* duplex(Platform& p, s4u::NetZone* zone, const std::string& name, double bw, double latency,
                             int track_node, int track_index, const std::string& track_name) {
  s4u::SplitDuplexLink* l = zone->create_split_duplex_link(name, bw);
  l->set_latency(latency)->seal();
  p.link_tracks[l->get_link_up()] = {trace::TrackKind::Link, track_node, track_index, track_name + ".up"};
  p.link_tracks[l->get_link_down()] = {trace::TrackKind::Link, track_node, track_index + 1, track_name + ".down"};
  return l;
}

// Node n's zone (GPUs, host, disk, shared cores) under `parent`, reached over its NIC.
void add_node(Platform& p, const ClusterSpec& c, s4u::NetZone* parent, int n) {
  const int I = c.gpus_per_node;
  const std::string node = "n" + std::to_string(n);
  auto* zone = s4u::create_star_zone("node" + std::to_string(n));
  zone->set_parent(parent);
  auto* gateway = zone->create_router(node + ".sw");  // routers need no route of their own
  for (int g = 0; g < I; ++g) {
    auto* gpu = zone->create_host(node + ".gpu" + std::to_string(g), p.gpu_speed_flops);
    const std::string pcie = "pcie" + std::to_string(g);
    zone->add_route(gpu->get_netpoint(), nullptr, nullptr, nullptr,
                    {{duplex(p, zone, node + "." + pcie, c.intra_node.bandwidth_bytes_per_s,
                             c.intra_node.latency_s / 2, n, 2 * g, pcie), kUp}},
                    true);
    p.gpus.push_back(gpu);
  }
  auto* host = zone->create_host(node + ".host", 1e9);  // runs nothing; speed is irrelevant
  s4u::SplitDuplexLink* mem = duplex(p, zone, node + ".mem", c.host.memory_bandwidth_bytes_per_s, 0, n, 2 * I, "host");
  zone->add_route(host->get_netpoint(), nullptr, nullptr, nullptr, {{mem, kUp}}, true);
  // The disk as a link: its reads (up) and writes (down) each at its
  // bandwidth, shared by the node's GPUs, streamed through host memory.
  s4u::SplitDuplexLink* disk =
      duplex(p, zone, node + ".disk", c.host.disk_bandwidth_bytes_per_s, 0, n, 4 * I + 2, "disk");
  // Host memory (and the disk behind it) as GPU g reaches it: over its own
  // host link, then the node's memory link, which every GPU's cache
  // traffic shares.
  for (int g = 0; g < I; ++g) {
    const std::string name = "hostlink" + std::to_string(g);
    s4u::SplitDuplexLink* own =
        duplex(p, zone, node + "." + name, c.gpu_host_link_bandwidth(), 0, n, 2 * I + 2 + 2 * g, name);
    p.host_links.push_back({own->get_link_up(), own->get_link_down()});
    auto* port = zone->create_host(node + ".host" + std::to_string(g), 1e9);
    zone->add_route(port->get_netpoint(), nullptr, nullptr, nullptr, {{own, kUp}, {mem, kUp}}, true);
    p.host_ports.push_back(port);
    auto* disk_port = zone->create_host(node + ".disk" + std::to_string(g), 1e9);
    zone->add_route(disk_port->get_netpoint(), nullptr, nullptr, nullptr, {{own, kUp}, {mem, kUp}, {disk, kUp}}, true);
    p.disk_ports.push_back(disk_port);
  }
  p.hosts.push_back(host);
  if (c.shared_cores > 0) {
    // Never a route endpoint: devices only run their executions here.
    auto* cpu = zone->create_host(node + ".cores", p.gpu_speed_flops);
    cpu->set_core_count(c.shared_cores);
    p.shared_cpus.push_back(cpu->seal());
  }
  zone->seal();
  const std::string ib = "ib" + std::to_string(n);
  parent->add_route(zone->get_netpoint(), nullptr, gateway, nullptr,
                    {{duplex(p, parent, ib, c.inter_node.bandwidth_bytes_per_s, c.inter_node.latency_s / 2, -1,
                             2 * n, ib), kUp}},
                    true);
}

// Leaf switch s of a fat tree under `root`: its nodes first..first+members-1,
// its fabric (non-blocking, its nodes' bandwidth) and its uplink (that over
// the oversubscription).
void add_leaf(Platform& p, const ClusterSpec& c, s4u::NetZone* root, int s, int first, int members, int leaves) {
  const std::string name = "switch" + std::to_string(s);
  auto* leaf = s4u::create_star_zone(name);
  leaf->set_parent(root);
  // The gateway sits in a zone of its own: SimGrid resolves a route from a
  // node's GPU to a router placed directly in the leaf as if the GPU were
  // the leaf's own point.
  auto* gateway_zone = s4u::create_star_zone(name + ".gw");
  gateway_zone->set_parent(leaf);
  auto* gateway = gateway_zone->create_router(name + ".up");
  gateway_zone->seal();
  for (int n = first; n < first + members; ++n) add_node(p, c, leaf, n);
  const double nodes_bw = members * c.inter_node.bandwidth_bytes_per_s;
  leaf->add_route(gateway_zone->get_netpoint(), nullptr, gateway, nullptr,
                  {{duplex(p, leaf, name + ".fabric", nodes_bw, 0, -1, 2 * (c.nodes + leaves + s), name + ".fabric"),
                    kUp}},
                  true);
  leaf->seal();
  const std::string uplink = "uplink" + std::to_string(s);
  root->add_route(leaf->get_netpoint(), nullptr, gateway, nullptr,
                  {{duplex(p, root, uplink, nodes_bw / c.topology.oversubscription, c.topology.uplink_latency_s, -1,
                           2 * (c.nodes + s), uplink), kUp}},
                  true);
}

}  // namespace

Platform build_platform(const ClusterSpec& c) {
  check_cluster(c);
  calibrate();

  Platform p;
  p.nodes = c.nodes;
  p.gpus_per_node = c.gpus_per_node;
  p.gpu_speed_flops = c.device.peak_flops_per_s * c.device.efficiency;
  p.host_link_bandwidth = c.gpu_host_link_bandwidth();
  auto* root = s4u::create_star_zone("cluster");
  const TopologySpec& t = c.topology;
  if (t.flat(c.nodes)) {
    for (int n = 0; n < c.nodes; ++n) add_node(p, c, root, n);
  } else {
    const int per_leaf = t.nodes_per_switch;
    const int leaves = (c.nodes + per_leaf - 1) / per_leaf;
    for (int s = 0; s < leaves; ++s)
      add_leaf(p, c, root, s, s * per_leaf, std::min(per_leaf, c.nodes - s * per_leaf), leaves);
    // A hop across leaves is a hop within one when the uplinks add no
    // latency and are never narrower than a NIC.
    const int smallest = c.nodes - (leaves - 1) * per_leaf;
    if (t.uplink_latency_s > 0 || t.oversubscription > smallest) p.alike_nodes = per_leaf;
  }
  root->seal();
  return p;
}

}  // namespace ep::sim
