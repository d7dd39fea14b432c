#include "planner/cluster_presets.hpp"

#include <map>

namespace ep {
namespace {

ClusterSpec node(const std::string& name, int gpus, DeviceSpec device, LinkSpec intra, LinkSpec inter, HostSpec host,
                 TransitionSpec transition) {
  ClusterSpec c;
  c.transition = transition;
  c.name = name;
  c.gpus_per_node = gpus;
  c.device = std::move(device);
  c.intra_node = intra;
  c.inter_node = inter;
  c.host = host;
  return c;
}

// Bandwidths per direction. "Assumed" marks what the vendors do not publish
// as one number: the sustained fraction of peak, the per-message latencies
// and the host side.
//
// Transition terms (planner/transition.cpp's formulas; sources in
// docs/SIMULATOR.md, "Transition costs"): a group made costs
// group_setup_s + group_per_rank_s x ranks. The paper's era (NCCL 2.x,
// V100 and InfiniBand: nvidia/nccl#534, 8 communicators of 8 ranks in
// 16.3 s and 32 of 32 in 130 s) gives 1.3 s + 0.085 s a rank; current DGX
// nodes (nvidia/nccl#1646: a B200 node's init 2.0 s in alloc, bootstrap,
// topology, connections; nvidia/nccl#1156: 2.5 minutes above a few thousand
// GPUs) 2.0 s + 0.035 s a rank. A freeze step's first iteration: 0.5 extra
// iterations assumed for the paper's GPUs, 0.1 on current ones (an H200
// measured 0-5 ms on 50 ms iterations). A woken process's one-off work:
// 3 s assumed for the paper's, 1 s for current nodes (a profile measures it).
constexpr TransitionSpec kPaperEra{3.0, 1.3, 0.085, 0.5};
constexpr TransitionSpec kDgx{1.0, 2.0, 0.035, 0.1};
const std::map<std::string, ClusterSpec>& presets() {
  static const std::map<std::string, ClusterSpec> table{
      // The paper's nodes (SPEC §7): 8 Quadro RTX 5000 on PCIe 3.0 x16,
      // InfiniBand FDR 56 Gb/s (ConnectX-3); FP32 peak 11.2 TFLOP/s.
      {"paper", node("8 x Quadro RTX 5000, PCIe 3.0 x16, InfiniBand FDR", 8,
                     {"Quadro RTX 5000", 11.2e12, 0.5, 50e-6, 17179869184.0, 448e9}, {15.754e9, 5e-6}, {7e9, 2e-6},
                     {274877906944.0, 12e9, 2e9, 15.754e9}, kPaperEra)},
      // DGX A100: 8 A100 SXM4 80GB (312 TFLOP/s dense BF16, 2,039 GB/s
      // HBM2e), NVLink 3 through NVSwitch (600 GB/s per GPU, both ways),
      // 8 x 200 Gb/s HDR InfiniBand; 2 TB of DDR4; host to GPU over four
      // PCIe 4.0 x16 switches (assumed 4 x 32 GB/s), each GPU on its own
      // x16 (assumed 32 GB/s); NVMe (assumed 25 GB/s).
      {"dgx_a100", node("DGX A100: 8 x A100 SXM4 80GB, NVLink 3, 8 x HDR 200 Gb/s", 8,
                        {"A100 SXM4 80GB", 312e12, 0.5, 10e-6, 85899345920.0, 2039e9}, {300e9, 3e-6}, {200e9, 5e-6},
                        {2199023255552.0, 128e9, 25e9, 32e9}, kDgx)},
      // DGX H100: 8 H100 SXM5 80GB (989 TFLOP/s dense BF16, 3.35 TB/s HBM3),
      // NVLink 4 through NVSwitch (900 GB/s per GPU, both ways),
      // 8 x 400 Gb/s NDR InfiniBand; 2 TB of DDR5; host to GPU over four
      // PCIe 5.0 x16 switches (assumed 4 x 64 GB/s), each GPU on its own
      // x16 (assumed 64 GB/s); NVMe (assumed 50 GB/s).
      {"dgx_h100", node("DGX H100: 8 x H100 SXM5 80GB, NVLink 4, 8 x NDR 400 Gb/s", 8,
                        {"H100 SXM5 80GB", 989e12, 0.5, 10e-6, 85899345920.0, 3.35e12}, {450e9, 3e-6}, {400e9, 5e-6},
                        {2199023255552.0, 256e9, 50e9, 64e9}, kDgx)},
  };
  return table;
}

}  // namespace

const ClusterSpec* find_cluster_preset(const std::string& name) {
  const auto it = presets().find(name);
  return it == presets().end() ? nullptr : &it->second;
}

std::string cluster_preset_names() {
  std::string names;
  for (const auto& [name, spec] : presets()) names += (names.empty() ? "" : "|") + name;
  return names;
}

}  // namespace ep
