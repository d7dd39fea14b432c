#include <catch2/catch.hpp>

#include "planner/cost_model.hpp"
#include "tests/planner/support.hpp"

using namespace ep;

namespace {

ClusterSpec cluster() {
  ClusterSpec c;
  c.nodes = 2;
  c.gpus_per_node = 8;
  c.device.peak_flops_per_s = 10e12;
  c.device.efficiency = 0.5;
  c.device.sublayer_overhead_s = 1e-4;
  c.device.memory_bytes = 16e9;
  c.device.memory_bandwidth_bytes_per_s = 400e9;
  c.intra_node = {16e9, 10e-6};
  c.inter_node = {7e9, 2e-6};
  c.host = {256e9, 20e9, 2e9};
  return c;
}

TrainingConfig sgd(double momentum) {
  TrainingConfig t;
  t.optimizer = Optimizer::SGD;
  t.momentum = momentum;
  return t;
}

Sublayer sublayer(double fwd_flops) {
  Sublayer s;
  s.kind = SublayerKind::Mlp;
  s.layer = 0;
  s.name = "mlp.0";
  s.fwd_flops_per_sample = fwd_flops;
  s.bwd_flops_per_sample = 2 * fwd_flops;
  return s;
}

}  // namespace

TEST_CASE("compute: overhead + FLOPs / (peak x efficiency)", "[cost_model]") {
  const AnalyticCostModel cost(cluster(), sgd(0.9));
  CHECK(cost.name() == "analytic");
  const Sublayer s = sublayer(1e9);
  // 8 samples x 1 GFLOP / 5 TFLOP/s = 1.6 ms, plus 0.1 ms.
  CHECK(cost.forward_s(s, 8) == Approx(1.7e-3));
  CHECK(cost.backward_s(s, 8) == Approx(3.3e-3));
  CHECK(cost.frozen_forward_s(s, 8) == cost.forward_s(s, 8));
  CHECK(cost.forward_s(s, 0) == Approx(1e-4));
}

TEST_CASE("p2p: latency + bytes / bandwidth", "[cost_model]") {
  const AnalyticCostModel cost(cluster(), sgd(0.9));
  CHECK(cost.p2p_s(16e6, LinkKind::IntraNode) == Approx(10e-6 + 1e-3));
  CHECK(cost.p2p_s(7e6, LinkKind::InterNode) == Approx(2e-6 + 1e-3));
}

TEST_CASE("ring all-reduce: 2(n-1)/n S/B + 2(n-1) latency", "[cost_model]") {
  const AnalyticCostModel cost(cluster(), sgd(0.9));
  const double S = 100e6;
  CHECK(cost.allreduce_s(S, 1, LinkKind::InterNode) == 0);
  CHECK(cost.allreduce_s(S, 2, LinkKind::InterNode) == Approx(S / 7e9 + 2 * 2e-6));
  CHECK(cost.allreduce_s(S, 8, LinkKind::IntraNode) ==
        Approx(2.0 * 7 / 8 * S / 16e9 + 14 * 10e-6));
}

TEST_CASE("cache: bytes / the slower of the tier and the GPU's host link", "[cost_model]") {
  ClusterSpec c = cluster();  // host memory 20 GB/s, disk 2 GB/s, GPUs to each other 16 GB/s
  c.host.gpu_link_bandwidth_bytes_per_s = 64e9;
  const AnalyticCostModel fast_link(c, sgd(0.9));
  CHECK(fast_link.cache_read_s(1e9, CacheTier::HostMemory) == Approx(0.05));
  CHECK(fast_link.cache_write_s(1e9, CacheTier::HostMemory) == Approx(0.05));
  CHECK(fast_link.cache_read_s(1e9, CacheTier::Disk) == Approx(0.5));
  CHECK(fast_link.cache_write_s(1e9, CacheTier::Disk) == Approx(0.5));
  c.host.gpu_link_bandwidth_bytes_per_s = 5e9;
  const AnalyticCostModel slow_link(c, sgd(0.9));
  CHECK(slow_link.cache_read_s(1e9, CacheTier::HostMemory) == Approx(0.2));
  CHECK(slow_link.cache_write_s(1e9, CacheTier::Disk) == Approx(0.5));
  // Unset: the GPUs' link to each other (PCIe on the paper's nodes).
  c.host.gpu_link_bandwidth_bytes_per_s = 0;
  const AnalyticCostModel unset(c, sgd(0.9));
  CHECK(unset.cache_read_s(1e9, CacheTier::HostMemory) == Approx(1.0 / 16));
}

TEST_CASE("optimizer step: bytes touched / memory bandwidth", "[cost_model]") {
  const double P = 100e6, B = 400e9;
  TrainingConfig adam;
  adam.optimizer = Optimizer::Adam;
  // weight r+w 8, grad r 4, per state r+w 8
  CHECK(AnalyticCostModel(cluster(), sgd(0)).optimizer_step_s(P) == Approx(12 * P / B));
  CHECK(AnalyticCostModel(cluster(), sgd(0.9)).optimizer_step_s(P) == Approx(20 * P / B));
  CHECK(AnalyticCostModel(cluster(), adam).optimizer_step_s(P) == Approx(28 * P / B));
}

TEST_CASE("times grow with bytes, ranks and samples", "[cost_model]") {
  const AnalyticCostModel cost(cluster(), sgd(0.9));
  const Sublayer s = sublayer(1e9);
  for (int n = 1; n < 64; ++n) {
    CHECK(cost.forward_s(s, n + 1) > cost.forward_s(s, n));
    CHECK(cost.backward_s(s, n + 1) > cost.backward_s(s, n));
    CHECK(cost.allreduce_s(1e6, n + 1, LinkKind::InterNode) >
          cost.allreduce_s(1e6, n, LinkKind::InterNode));
  }
  for (double bytes = 1; bytes < 1e10; bytes *= 10) {
    for (LinkKind link : {LinkKind::IntraNode, LinkKind::InterNode}) {
      CHECK(cost.p2p_s(bytes * 10, link) > cost.p2p_s(bytes, link));
      CHECK(cost.allreduce_s(bytes * 10, 4, link) > cost.allreduce_s(bytes, 4, link));
    }
    for (CacheTier tier : {CacheTier::HostMemory, CacheTier::Disk}) {
      CHECK(cost.cache_read_s(bytes * 10, tier) > cost.cache_read_s(bytes, tier));
      CHECK(cost.cache_write_s(bytes * 10, tier) > cost.cache_write_s(bytes, tier));
    }
    CHECK(cost.optimizer_step_s(bytes * 10) > cost.optimizer_step_s(bytes));
  }
}

TEST_CASE("stage helpers sum over the sublayer range", "[cost_model]") {
  ModelConfig m = test::bert(2, 64, 256, 4);
  m.seq_length = 32;
  m.vocab_size = 1000;
  m.max_position_embeddings = 64;
  const ModelSpec spec = build_model_spec(m, Precision::FP32);
  const AnalyticCostModel cost(cluster(), sgd(0.9));
  const SublayerRange r{1, 4};
  double fwd = 0, bwd = 0;
  for (int i = r.first; i < r.last; ++i) {
    fwd += cost.forward_s(spec.sublayers[i], 4);
    bwd += cost.backward_s(spec.sublayers[i], 4);
  }
  CHECK(stage_forward_s(cost, spec, r, 4) == Approx(fwd));
  CHECK(stage_backward_s(cost, spec, r, 4) == Approx(bwd));
  CHECK(stage_frozen_forward_s(cost, spec, r, 4) == Approx(fwd));
  CHECK(stage_forward_s(cost, spec, {2, 2}, 4) == 0);
}
