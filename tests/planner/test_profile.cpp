#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include <nlohmann/json.hpp>

#include "planner/cost_model.hpp"
#include "planner/error.hpp"
#include "planner/fitted_cost_model.hpp"
#include "planner/model_spec.hpp"
#include "planner/profile.hpp"
#include "tests/planner/support.hpp"

using namespace ep;
using nlohmann::json;

namespace {

// The cluster of test_cost_model.cpp: the ground truth the fits must recover.
constexpr double kOverhead = 1e-4, kPeak = 10e12, kEff = 0.5;
constexpr double kIntraBw = 16e9, kIntraLat = 10e-6;
constexpr double kHostBw = 20e9, kDiskBw = 2e9, kMemBw = 400e9;

ClusterSpec cluster() {
  ClusterSpec c;
  c.nodes = 2;
  c.gpus_per_node = 8;
  c.device.peak_flops_per_s = kPeak;
  c.device.efficiency = kEff;
  c.device.sublayer_overhead_s = kOverhead;
  c.device.memory_bytes = 16e9;
  c.device.memory_bandwidth_bytes_per_s = kMemBw;
  c.intra_node = {kIntraBw, kIntraLat};
  c.inter_node = {7e9, 2e-6};
  c.host = {256e9, kHostBw, kDiskBw, 64e9};
  return c;
}

TrainingConfig sgd() {
  TrainingConfig t;
  t.optimizer = Optimizer::SGD;
  t.momentum = 0.9;  // 20 bytes per parameter
  return t;
}

// ViT-B/16: the work of attention, MLP and stem outweighs the overhead from
// a few samples on, the head's never (1.5 MFLOP per sample).
ModelSpec spec() { return build_model_spec(test::vit_b16(), Precision::FP32); }

// One sublayer of each kind, in SublayerKind order.
std::vector<Sublayer> one_per_kind(const ModelSpec& s) {
  return {s.sublayers[0], s.sublayers[1], s.sublayers[2], s.sublayers[s.head_sublayer()]};
}

// Analytic times, each sample repeated and scaled by (1 + U(-noise, noise)).
Profile synthetic(const CostModel& truth, const ModelSpec& s, double noise, int repeats = 1,
                  unsigned seed = 7) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-noise, noise);
  const auto measure = [&](double t) { return t * (1 + u(rng)); };
  Profile p;
  p.environment = "synthetic: analytic model of the test cluster";
  p.model = "vit-b/16";
  for (int r = 0; r < repeats; ++r) {
    for (const Sublayer& sub : one_per_kind(s))
      for (int b : {1, 2, 4, 8, 16, 32}) {
        const std::string kind = to_string(sub.kind);
        p.compute.push_back({kind, "forward", b, measure(truth.forward_s(sub, b))});
        p.compute.push_back({kind, "backward", b, measure(truth.backward_s(sub, b))});
        p.compute.push_back({kind, "frozen_forward", b, measure(truth.frozen_forward_s(sub, b))});
      }
    for (double bytes : {0.0, 1e3, 1e5, 1e7, 1e8})
      p.p2p.push_back({bytes, measure(truth.p2p_s(bytes, LinkKind::IntraNode))});
    for (double bytes : {1e4, 1e6, 1e8})
      for (int ranks : {2, 4, 8})
        p.allreduce.push_back(
            {bytes, ranks, measure(truth.allreduce_s(bytes, ranks, LinkKind::IntraNode))});
    for (double bytes : {1e5, 1e7, 1e9}) {
      p.cache.push_back({"host", "read", bytes, measure(truth.cache_read_s(bytes, CacheTier::HostMemory))});
      p.cache.push_back({"host", "write", bytes, measure(truth.cache_write_s(bytes, CacheTier::HostMemory))});
      p.cache.push_back({"disk", "read", bytes, measure(truth.cache_read_s(bytes, CacheTier::Disk))});
      p.cache.push_back({"disk", "write", bytes, measure(truth.cache_write_s(bytes, CacheTier::Disk))});
    }
    for (double params : {1e5, 1e6, 1e7})
      p.optimizer.push_back({params, measure(truth.optimizer_step_s(params))});
  }
  p.transitions.push_back({"group_rebuild", 4, 0, 0.8});
  p.transitions.push_back({"state_transfer", 2, 1e8, 0.05});
  return p;
}

// Held-out points (other b, bytes, ranks than profiled, in or a little past
// the profiled range): every term of `fitted` within `tolerance` (relative)
// of `truth`.
void check_predictions(const CostModel& fitted, const CostModel& truth, const ModelSpec& s,
                       double tolerance) {
  for (const Sublayer& sub : one_per_kind(s))
    for (int b : {3, 6, 12, 24, 48}) {
      INFO(sub.name << " b=" << b);
      CHECK(fitted.forward_s(sub, b) == Approx(truth.forward_s(sub, b)).epsilon(tolerance));
      CHECK(fitted.backward_s(sub, b) == Approx(truth.backward_s(sub, b)).epsilon(tolerance));
      CHECK(fitted.frozen_forward_s(sub, b) ==
            Approx(truth.frozen_forward_s(sub, b)).epsilon(tolerance));
    }
  for (double bytes : {5e2, 3e4, 3e6, 5e8}) {
    INFO("bytes=" << bytes);
    CHECK(fitted.p2p_s(bytes, LinkKind::IntraNode) ==
          Approx(truth.p2p_s(bytes, LinkKind::IntraNode)).epsilon(tolerance));
    for (int ranks : {3, 6, 16}) {
      INFO("ranks=" << ranks);
      CHECK(fitted.allreduce_s(bytes, ranks, LinkKind::IntraNode) ==
            Approx(truth.allreduce_s(bytes, ranks, LinkKind::IntraNode)).epsilon(tolerance));
    }
  }
  for (double bytes : {3e5, 3e7, 5e9}) {
    INFO("cache bytes=" << bytes);
    for (CacheTier tier : {CacheTier::HostMemory, CacheTier::Disk}) {
      CHECK(fitted.cache_read_s(bytes, tier) ==
            Approx(truth.cache_read_s(bytes, tier)).epsilon(tolerance));
      CHECK(fitted.cache_write_s(bytes, tier) ==
            Approx(truth.cache_write_s(bytes, tier)).epsilon(tolerance));
    }
  }
  for (double params : {3e5, 3e6, 5e7}) {
    INFO("params=" << params);
    CHECK(fitted.optimizer_step_s(params) ==
          Approx(truth.optimizer_step_s(params)).epsilon(tolerance));
  }
  CHECK(fitted.allreduce_s(1e8, 1, LinkKind::IntraNode) == 0);
}

// The parameters of the analytic cluster, read back from the fits. With
// `identifiable_only`, a compute coefficient is checked only where its term
// is at least half of the time at the end of the profiled range that
// favours it (b = 1 for the overhead, b = 32 for the work): elsewhere the
// noise hides it, and the predictions do not depend on it either.
void check_parameters(const FittedCostModel& fitted, const ModelSpec& s, double tolerance,
                      bool identifiable_only = false) {
  const FittedCoefficients& f = fitted.coefficients();
  int checked = 0;
  for (const Sublayer& sub : one_per_kind(s))
    for (ComputeOp op : {ComputeOp::Forward, ComputeOp::Backward, ComputeOp::FrozenForward}) {
      INFO(sub.name << " op " << static_cast<int>(op));
      const double per_sample =
          (op == ComputeOp::Backward ? sub.bwd_flops_per_sample : sub.fwd_flops_per_sample) /
          (kPeak * kEff);
      const LinearFit& fit = f.compute_fit(sub.kind, op);
      if (!identifiable_only || kOverhead >= 0.5 * (kOverhead + per_sample)) {
        CHECK(fit.a == Approx(kOverhead).epsilon(tolerance));
        ++checked;
      }
      if (!identifiable_only || 32 * per_sample >= 0.5 * (kOverhead + 32 * per_sample)) {
        CHECK(fit.c == Approx(per_sample).epsilon(tolerance));
        ++checked;
      }
    }
  CHECK(checked >= 12);
  REQUIRE(f.p2p);
  CHECK(f.p2p->a == Approx(kIntraLat).epsilon(tolerance));
  CHECK(1 / f.p2p->c == Approx(kIntraBw).epsilon(tolerance));
  REQUIRE(f.allreduce);
  CHECK(f.allreduce->a == Approx(kIntraLat).epsilon(tolerance));
  CHECK(1 / f.allreduce->c == Approx(kIntraBw).epsilon(tolerance));
  for (CacheOp op : {CacheOp::Read, CacheOp::Write}) {
    REQUIRE(f.cache_fit(CacheTier::HostMemory, op));
    REQUIRE(f.cache_fit(CacheTier::Disk, op));
    CHECK(1 / f.cache_fit(CacheTier::HostMemory, op)->c == Approx(kHostBw).epsilon(tolerance));
    CHECK(1 / f.cache_fit(CacheTier::Disk, op)->c == Approx(kDiskBw).epsilon(tolerance));
  }
  REQUIRE(f.optimizer);
  CHECK(f.optimizer->c == Approx(20 / kMemBw).epsilon(tolerance));
}

// The message parse_profile gives for `j` after `mutate`.
std::string parse_error(const std::function<void(json&)>& mutate) {
  const AnalyticCostModel truth(cluster(), sgd());
  json j = to_json(synthetic(truth, spec(), 0));
  mutate(j);
  return test::error_of([&] { (void)parse_profile(j, "p.json"); });
}


}  // namespace

TEST_CASE("fitted model reproduces the analytic model it was profiled from", "[profile]") {
  const ModelSpec s = spec();
  const AnalyticCostModel truth(cluster(), sgd());
  const FittedCostModel fitted(synthetic(truth, s, 0), truth);
  CHECK(fitted.name() == "fitted");
  check_predictions(fitted, truth, s, 0.01);
  check_parameters(fitted, s, 0.01);
  // Exact data: the fits explain everything.
  const FittedCoefficients& f = fitted.coefficients();
  CHECK(f.compute_fit(SublayerKind::Attention, ComputeOp::Forward).r2 == Approx(1).epsilon(1e-9));
  CHECK(f.compute_fit(SublayerKind::Attention, ComputeOp::Forward).rms_rel_residual < 1e-9);
  CHECK(f.compute_fit(SublayerKind::Attention, ComputeOp::Forward).samples == 6);
  CHECK(f.p2p->max_rel_residual < 1e-9);
  CHECK(f.allreduce->samples == 9);

  const std::string text = fitted.describe();
  CHECK_THAT(text, Catch::Contains("compute attention/backward"));
  CHECK_THAT(text, Catch::Contains("cache disk/write"));
  CHECK_THAT(text, Catch::Contains("p2p: latency 1e-05 s, bandwidth 16 GB/s"));
  CHECK_THAT(text, Catch::Contains("group_rebuild mean 0.8 s (n=1)"));
  CHECK_THAT(text, Catch::Contains("synthetic: analytic model"));
}

TEST_CASE("fitted model under 2% multiplicative noise stays within 3%", "[profile]") {
  const ModelSpec s = spec();
  const AnalyticCostModel truth(cluster(), sgd());
  for (unsigned seed : {1u, 2u, 3u}) {
    INFO("seed " << seed);
    const FittedCostModel fitted(synthetic(truth, s, 0.02, 3, seed), truth);
    check_predictions(fitted, truth, s, 0.03);
    check_parameters(fitted, s, 0.03, true);
    const LinearFit& f = fitted.coefficients().compute_fit(SublayerKind::Mlp, ComputeOp::Backward);
    CHECK(f.r2 > 0.99);
    CHECK(f.rms_rel_residual < 0.02);
    CHECK(f.max_rel_residual < 0.04);
  }
}

TEST_CASE("fitted model takes unprofiled terms from the fallback", "[profile]") {
  const ModelSpec s = spec();
  const AnalyticCostModel truth(cluster(), sgd());
  ClusterSpec other = cluster();
  other.intra_node = {1e9, 1e-3};
  other.inter_node = {0.5e9, 2e-3};
  other.host = {1e9, 3e9, 0.1e9};
  other.device.memory_bandwidth_bytes_per_s = 50e9;
  const AnalyticCostModel fallback(other, sgd());

  Profile p = synthetic(truth, s, 0);
  p.p2p.clear();
  p.allreduce.clear();
  p.optimizer.clear();
  std::erase_if(p.cache, [](const CacheSample& c) { return c.tier == "disk"; });
  const FittedCostModel fitted(p, fallback);
  for (LinkKind link : {LinkKind::IntraNode, LinkKind::InterNode}) {
    CHECK(fitted.p2p_s(1e6, link) == fallback.p2p_s(1e6, link));
    CHECK(fitted.allreduce_s(1e6, 4, link) == fallback.allreduce_s(1e6, 4, link));
  }
  CHECK(fitted.optimizer_step_s(1e6) == fallback.optimizer_step_s(1e6));
  CHECK(fitted.cache_read_s(1e6, CacheTier::Disk) == fallback.cache_read_s(1e6, CacheTier::Disk));
  CHECK(fitted.cache_write_s(1e6, CacheTier::Disk) == fallback.cache_write_s(1e6, CacheTier::Disk));
  // Host cache was profiled: the truth, not the fallback.
  CHECK(fitted.cache_read_s(1e6, CacheTier::HostMemory) ==
        Approx(truth.cache_read_s(1e6, CacheTier::HostMemory)).epsilon(0.01));
  CHECK(fitted.forward_s(s.sublayers[1], 8) == Approx(truth.forward_s(s.sublayers[1], 8)));
  CHECK_FALSE(fitted.coefficients().p2p);
  CHECK_THAT(fitted.describe(), Catch::Contains("no samples: analytic model"));
  CHECK(&fitted.fallback() == &fallback);
}

TEST_CASE("one p2p fit serves both link kinds", "[profile]") {
  const AnalyticCostModel truth(cluster(), sgd());
  const FittedCostModel fitted(synthetic(truth, spec(), 0), truth);
  CHECK(fitted.p2p_s(1e6, LinkKind::InterNode) == fitted.p2p_s(1e6, LinkKind::IntraNode));
  CHECK(fitted.allreduce_s(1e6, 4, LinkKind::InterNode) ==
        fitted.allreduce_s(1e6, 4, LinkKind::IntraNode));
}

TEST_CASE("negative least-squares coefficients are refit at 0", "[profile]") {
  const AnalyticCostModel truth(cluster(), sgd());
  Profile p = synthetic(truth, spec(), 0);
  // Convex in params: the unconstrained line has a negative intercept.
  p.optimizer = {{1e6, 1.0}, {2e6, 2.5}, {3e6, 4.0}};
  // A decreasing time: the unconstrained slope is negative.
  p.p2p = {{1e3, 2e-3}, {1e6, 1e-3}};
  const FittedCostModel fitted(p, truth);
  const LinearFit& opt = *fitted.coefficients().optimizer;
  CHECK(opt.clamped);
  CHECK(opt.a == 0);
  // Relative least squares through the origin: c = sum(x/t) / sum((x/t)^2).
  double num = 0, den = 0;
  for (const OptimizerSample& o : p.optimizer) {
    num += o.params / o.seconds;
    den += (o.params / o.seconds) * (o.params / o.seconds);
  }
  CHECK(opt.c == Approx(num / den));
  const LinearFit& p2p = *fitted.coefficients().p2p;
  CHECK(p2p.clamped);
  CHECK(p2p.c == 0);
  CHECK(p2p.a > 1e-3);
  CHECK(p2p.a < 2e-3);
  CHECK(fitted.optimizer_step_s(0) == 0);
  CHECK_THAT(fitted.describe(), Catch::Contains("*"));
}

TEST_CASE("fitting refuses profiles that cannot determine the model", "[profile]") {
  const ModelSpec s = spec();
  const AnalyticCostModel truth(cluster(), sgd());
  const Profile good = synthetic(truth, s, 0);

  SECTION("a compute kind/op without samples") {
    Profile p = good;
    std::erase_if(p.compute, [](const ComputeSample& c) {
      return (c.sublayer_kind == "head" && c.op == "frozen_forward") ||
             (c.sublayer_kind == "stem" && c.op == "backward");
    });
    CHECK_THAT(test::error_of([&] { FittedCostModel f(p, truth); }),
               Catch::Contains("no compute samples for stem/backward, head/frozen_forward"));
  }
  SECTION("one micro-batch size cannot separate overhead from work") {
    Profile p = good;
    std::erase_if(p.compute, [](const ComputeSample& c) { return c.sublayer_kind == "mlp" && c.samples != 4; });
    CHECK_THAT(test::error_of([&] { FittedCostModel f(p, truth); }),
               Catch::Contains("compute mlp/forward") &&
                   Catch::Contains("need at least two distinct micro-batch sizes"));
  }
  SECTION("one byte count") {
    Profile p = good;
    p.cache = {{"disk", "read", 1e6, 1e-3}, {"disk", "read", 1e6, 1.1e-3}};
    CHECK_THAT(test::error_of([&] { FittedCostModel f(p, truth); }),
               Catch::Contains("cache disk/read") && Catch::Contains("two distinct byte counts"));
  }
  SECTION("all-reduce on one rank only") {
    Profile p = good;
    p.allreduce = {{1e6, 1, 1e-5}, {1e7, 1, 1e-5}};
    CHECK_THAT(test::error_of([&] { FittedCostModel f(p, truth); }),
               Catch::Contains("allreduce: every sample has ranks = 1"));
  }
  SECTION("a profile built in code gets the file's checks") {
    Profile p = good;
    p.compute[2].seconds = 0;
    CHECK_THAT(test::error_of([&] { FittedCostModel f(p, truth); }),
               Catch::Contains("profile: compute[2].seconds: expected a number > 0 and <= 3600 (one measured operation; an hour is beyond any), found 0"));
    p = good;
    p.cache[1].tier = "ssd";
    CHECK_THAT(test::error_of([&] { FittedCostModel f(p, truth); }),
               Catch::Contains("cache[1].tier: expected one of \"host\", \"disk\", found \"ssd\""));
  }
}

TEST_CASE("forward_again: fitted when profiled for every kind, forward without it, refused when partial", "[profile]") {
  const ModelSpec s = spec();
  const AnalyticCostModel truth(cluster(), sgd());
  const Profile fp32 = synthetic(truth, s, 0);
  Profile bf16 = fp32;
  for (const ComputeSample& c : fp32.compute)  // a later micro-batch: 40 us of weight casts fewer
    if (c.op == "forward") bf16.compute.push_back({c.sublayer_kind, "forward_again", c.samples, c.seconds - 4e-5});
  const FittedCostModel with(bf16, truth), without(fp32, truth);
  CHECK(with.coefficients().forward_again);
  CHECK_FALSE(without.coefficients().forward_again);
  for (const Sublayer& sub : one_per_kind(s))
    for (int b : {1, 4, 32}) {
      INFO(to_string(sub.kind) << " b=" << b);
      CHECK(with.forward_s(sub, b) == Approx(truth.forward_s(sub, b)));
      CHECK(with.forward_again_s(sub, b) == Approx(truth.forward_s(sub, b) - 4e-5));
      CHECK(without.forward_again_s(sub, b) == without.forward_s(sub, b));
    }
  CHECK_THAT(with.describe(), Catch::Contains("compute mlp/forward_again"));
  CHECK_THAT(without.describe(), Catch::Contains("compute */forward_again") && Catch::Contains("no samples: forward"));
  Profile partial = bf16;
  std::erase_if(partial.compute, [](const ComputeSample& c) { return c.sublayer_kind == "head" && c.op == "forward_again"; });
  CHECK_THAT(test::error_of([&] { FittedCostModel f(partial, truth); }),
             Catch::Contains("no compute samples for head/forward_again") && Catch::Contains("when any kind has it"));
}

// A layer frozen inside runs its backward for the input's gradient alone
// (decision 0037): measured, it is fitted as any op; unmeasured, the
// backward by the sublayer's FLOP share of it stands in.
TEST_CASE("backward_input: fitted for attention and mlp when profiled, the FLOP share without it", "[profile]") {
  const ModelSpec s = spec();
  const AnalyticCostModel truth(cluster(), sgd());
  const Profile plain = synthetic(truth, s, 0);
  Profile timed = plain;
  for (const ComputeSample& c : plain.compute)  // 0.7 of the backward, not the FLOP share (0.50 and 0.56)
    if (c.op == "backward" && (c.sublayer_kind == "attention" || c.sublayer_kind == "mlp"))
      timed.compute.push_back({c.sublayer_kind, "backward_input", c.samples, 0.7 * c.seconds});
  const Profile read = parse_profile(to_json(timed), "timed");  // the file keeps them
  REQUIRE(read.compute.size() == timed.compute.size());
  const FittedCostModel with(read, truth), without(plain, truth);
  CHECK(with.coefficients().backward_input);
  CHECK_FALSE(without.coefficients().backward_input);
  for (const Sublayer& sub : {s.sublayers[1], s.sublayers[2]})
    for (int b : {1, 3, 32, 48}) {
      INFO(to_string(sub.kind) << " b=" << b);
      CHECK(with.backward_input_s(sub, b) == Approx(0.7 * truth.backward_s(sub, b)));
      const double share = sub.bwd_input_flops_per_sample / sub.bwd_flops_per_sample;
      CHECK(share < 0.6);
      CHECK(without.backward_input_s(sub, b) == Approx(share * without.backward_s(sub, b)));
    }
  CHECK_THAT(with.describe(), Catch::Contains("compute attention/backward_input") &&
                                  Catch::Contains("compute mlp/backward_input") && !Catch::Contains("*/backward_input"));
  CHECK_THAT(without.describe(), Catch::Contains("compute */backward_input") &&
                                     Catch::Contains("no samples: backward by its FLOP share"));
  CHECK(without.cautions() == FittedCostModel(read, truth).cautions());  // not a caution: it has a stand-in
  Profile partial = timed;
  std::erase_if(partial.compute,
                [](const ComputeSample& c) { return c.sublayer_kind == "mlp" && c.op == "backward_input"; });
  CHECK_THAT(test::error_of([&] { FittedCostModel f(partial, truth); }),
             Catch::Contains("no compute samples for mlp/backward_input") &&
                 Catch::Contains("attention and mlp need backward_input when either has it"));
  Profile stem = timed;
  stem.compute.push_back({"stem", "backward_input", 4, 1e-3});
  CHECK_THAT(test::error_of([&] { FittedCostModel f(stem, truth); }),
             Catch::Contains("backward_input samples for stem, expected attention and mlp only"));
  Profile chain = plain;
  chain.model_chain = {{"backward_input", 8, 0.01}};  // per sublayer only
  CHECK_THAT(test::error_of([&] { check_profile(chain, "p.json"); }), Catch::Contains("model_chain[0].op"));
}

TEST_CASE("profile round-trips through JSON and a file", "[profile]") {
  const AnalyticCostModel truth(cluster(), sgd());
  Profile p = synthetic(truth, spec(), 0.02);
  p.model_chain = {{"forward", 8, 0.031}, {"backward", 8, 0.0625}, {"frozen_forward", 16, 1.0 / 3},
                   {"forward_again", 8, 0.029}};
  p.compute.push_back({"mlp", "forward_again", 4, 0.0011});
  p.grad_norms = {{1e6, 2e-4}, {4e6, 5e-4}};
  p.cache_probes = {{1, 128, 0.0254}, {6, 128, 0.0571}};
  const auto same = [&](const Profile& q) {
    CHECK(q.environment == p.environment);
    CHECK(q.model == p.model);
    REQUIRE(q.compute.size() == p.compute.size());
    for (std::size_t i = 0; i < p.compute.size(); ++i) {
      CHECK(q.compute[i].sublayer_kind == p.compute[i].sublayer_kind);
      CHECK(q.compute[i].op == p.compute[i].op);
      CHECK(q.compute[i].samples == p.compute[i].samples);
      CHECK(q.compute[i].seconds == p.compute[i].seconds);  // exact: JSON keeps doubles
    }
    REQUIRE(q.model_chain.size() == p.model_chain.size());
    for (std::size_t i = 0; i < p.model_chain.size(); ++i) {
      CHECK(q.model_chain[i].op == p.model_chain[i].op);
      CHECK(q.model_chain[i].samples == p.model_chain[i].samples);
      CHECK(q.model_chain[i].seconds == p.model_chain[i].seconds);
    }
    REQUIRE(q.p2p.size() == p.p2p.size());
    CHECK(q.p2p.back().bytes == p.p2p.back().bytes);
    CHECK(q.p2p.back().seconds == p.p2p.back().seconds);
    REQUIRE(q.allreduce.size() == p.allreduce.size());
    CHECK(q.allreduce[4].ranks == p.allreduce[4].ranks);
    CHECK(q.allreduce[4].seconds == p.allreduce[4].seconds);
    REQUIRE(q.cache.size() == p.cache.size());
    CHECK(q.cache[3].tier == p.cache[3].tier);
    CHECK(q.cache[3].op == p.cache[3].op);
    CHECK(q.cache[3].bytes == p.cache[3].bytes);
    REQUIRE(q.optimizer.size() == p.optimizer.size());
    CHECK(q.optimizer[1].params == p.optimizer[1].params);
    REQUIRE(q.grad_norms.size() == p.grad_norms.size());
    CHECK(q.grad_norms[1].params == p.grad_norms[1].params);
    CHECK(q.grad_norms[1].seconds == p.grad_norms[1].seconds);
    REQUIRE(q.transitions.size() == p.transitions.size());
    CHECK(q.transitions[1].what == "state_transfer");
    CHECK(q.transitions[1].ranks == 2);
    CHECK(q.transitions[1].bytes == 1e8);
    CHECK(q.transitions[1].seconds == 0.05);
    REQUIRE(q.cache_probes.size() == 2);
    CHECK(q.cache_probes[1].frozen_layers == 6);
    CHECK(q.cache_probes[1].samples == 128);
    CHECK(q.cache_probes[1].seconds == 0.0571);
  };
  const json j = to_json(p);
  CHECK(j.at("schema") == "elasticpipe.profile/1");
  same(parse_profile(j, "mem"));
  same(parse_profile(json::parse(j.dump()), "text"));

  const test::TempDir dir("profile");
  const std::string path = dir.file("profile.json");
  write_profile(p, path);
  same(read_profile(path));

  Profile minimal;
  minimal.compute = {{"stem", "forward", 1, 1e-3}};
  const Profile back = parse_profile(to_json(minimal), "mem");
  CHECK(back.p2p.empty());
  CHECK(back.transitions.empty());
  CHECK(back.environment.empty());
  // Profiles written before the whole model's chain was recorded read
  // without one.
  json old = to_json(p);
  old.erase("model_chain");
  CHECK(parse_profile(old, "old").model_chain.empty());
  // And before the gradients' norms were timed apart from the update.
  old.erase("grad_norms");
  CHECK(parse_profile(old, "old").grad_norms.empty());
  // And before whole probes were timed.
  old.erase("cache_probes");
  CHECK(parse_profile(old, "old").cache_probes.empty());
}

TEST_CASE("the gradients' norms cost a step only where the freeze policy reads them", "[profile]") {
  const ModelSpec s = spec();
  const AnalyticCostModel truth(cluster(), sgd());
  Profile p = synthetic(truth, s, 0);
  // The norms: 0.1 ms + 2e-10 s per parameter.
  p.grad_norms = {{1e6, 1e-4 + 2e-4}, {4e6, 1e-4 + 8e-4}, {1.6e7, 1e-4 + 3.2e-3}};
  const FittedCostModel fitted(p, truth);
  CHECK(fitted.grad_norms_s(8e6) == Approx(1e-4 + 1.6e-3));
  CHECK_THAT(fitted.describe(), Catch::Contains("gradient norms"));
  // Without samples (a profile from before): 0, the step's fit holding them.
  p.grad_norms.clear();
  CHECK(FittedCostModel(p, truth).grad_norms_s(8e6) == 0);
  CHECK(truth.grad_norms_s(8e6) == 0);
  CHECK_THAT(FittedCostModel(p, truth).describe(), Catch::Contains("no samples: inside the optimizer step"));
}

TEST_CASE("malformed profiles are refused naming path, expected and found", "[profile]") {
  using Catch::Contains;
  CHECK_THAT(parse_error([](json& j) { j["compute"][3]["seconds"] = "abc"; }),
             Contains("p.json: compute[3].seconds: expected a number > 0 and <= 3600 (one measured operation; an hour is beyond any), found \"abc\""));
  CHECK_THAT(parse_error([](json& j) { j["compute"][0]["seconds"] = 0; }),
             Contains("compute[0].seconds: expected a number > 0 and <= 3600 (one measured operation; an hour is beyond any), found 0"));
  CHECK_THAT(parse_error([](json& j) { j["p2p"][1]["seconds"] = -1e-3; }),
             Contains("p2p[1].seconds: expected a number > 0 and <= 3600 (one measured operation; an hour is beyond any), found -0.001"));
  CHECK_THAT(parse_error([](json& j) { j["p2p"][0]["bytes"] = -1; }),
             Contains("p2p[0].bytes: expected a number >= 0 and <= 1e15 (a petabyte), found -1"));
  CHECK_THAT(parse_error([](json& j) { j["cache"][2]["bytes"] = nullptr; }),
             Contains("cache[2].bytes: expected a number >= 0 and <= 1e15 (a petabyte), found null"));
  // Beyond physics: a damaged number, not a slow machine.
  CHECK_THAT(parse_error([](json& j) { j["optimizer"][0]["seconds"] = 1e30; }),
             Contains("optimizer[0].seconds: expected a number > 0 and <= 3600") && Contains("found 1e+30"));
  CHECK_THAT(parse_error([](json& j) { j["p2p"][0]["bytes"] = 1e300; }), Contains("p2p[0].bytes: expected"));
  CHECK_THAT(parse_error([](json& j) { j["compute"][1]["samples"] = 2.5; }),
             Contains("compute[1].samples: expected an integer >= 1, found 2.5"));
  CHECK_THAT(parse_error([](json& j) { j["compute"][1]["samples"] = 0; }),
             Contains("compute[1].samples: expected an integer >= 1, found 0"));
  CHECK_THAT(parse_error([](json& j) { j["compute"][1]["samples"] = 1e10; }),
             Contains("compute[1].samples: expected an integer >= 1, found 10000000000.0"));
  CHECK_THAT(parse_error([](json& j) { j["compute"][1]["samples"] = 10000000000; }),
             Contains("compute[1].samples: expected an integer >= 1 and <= 2147483647"));
  CHECK_THAT(parse_error([](json& j) { j["allreduce"][0]["ranks"] = 0; }),
             Contains("allreduce[0].ranks: expected an integer >= 1, found 0"));
  CHECK_THAT(parse_error([](json& j) { j["transitions"][0]["ranks"] = -2; }),
             Contains("transitions[0].ranks: expected an integer >= 1, found -2"));
  CHECK_THAT(parse_error([](json& j) { j["compute"][0]["sublayer_kind"] = "embedding"; }),
             Contains("compute[0].sublayer_kind: expected one of \"stem\", \"attention\", \"mlp\", "
                      "\"head\", found \"embedding\""));
  CHECK_THAT(parse_error([](json& j) { j["compute"][5]["op"] = "fwd"; }),
             Contains("compute[5].op: expected one of \"forward\", \"forward_again\", \"backward\", \"frozen_forward\", "
                      "\"backward_input\", found \"fwd\""));
  CHECK_THAT(parse_error([](json& j) { j["cache"][0]["tier"] = "ssd"; }),
             Contains("cache[0].tier: expected one of \"host\", \"disk\", found \"ssd\""));
  CHECK_THAT(parse_error([](json& j) { j["cache"][0]["op"] = "append"; }),
             Contains("cache[0].op: expected one of \"read\", \"write\", found \"append\""));
  CHECK_THAT(parse_error([](json& j) { j["transitions"][0]["what"] = ""; }),
             Contains("transitions[0].what: expected a non-empty string, found \"\""));
  CHECK_THAT(parse_error([](json& j) { j["environment"] = 3; }),
             Contains("environment: expected a string, found 3"));
  CHECK_THAT(parse_error([](json& j) { j["compute"][0].erase("seconds"); }),
             Contains("compute[0].seconds: expected a value") && Contains("found nothing"));
  CHECK_THAT(parse_error([](json& j) { j["compute"][0]["secs"] = 1; }),
             Contains("compute[0].secs: expected no such key") &&
                 Contains("found the key \"secs\""));
  CHECK_THAT(parse_error([](json& j) { j.erase("optimizer"); }),
             Contains("p.json: optimizer: expected a value"));
  CHECK_THAT(parse_error([](json& j) { j["schema"] = "elasticpipe.profile/2"; }),
             Contains("schema: expected \"elasticpipe.profile/1\", found \"elasticpipe.profile/2\""));
  CHECK_THAT(parse_error([](json& j) { j["compute"] = json::array(); }),
             Contains("compute: expected at least one sample, found an empty list"));
  CHECK_THAT(parse_error([](json& j) { j["p2p"] = json::object(); }),
             Contains("p2p: expected a list, found {}"));
  CHECK_THAT(parse_error([](json& j) { j["allreduce"][0] = 5; }),
             Contains("allreduce[0]: expected an object with keys bytes, ranks, seconds, found 5"));
  CHECK_THAT(parse_error([](json& j) { j["model_chain"] = json::array({{{"op", "fwd"}, {"samples", 2}, {"seconds", 1}}}); }),
             Contains("model_chain[0].op: expected one of \"forward\", \"forward_again\", \"backward\", \"frozen_forward\""));
  CHECK_THAT(parse_error([](json& j) { j["model_chain"] = json::array({{{"op", "forward"}, {"samples", 2}}}); }),
             Contains("model_chain[0].seconds: expected a value"));
  CHECK_THAT(parse_error([](json& j) { j["model_chains"] = json::array(); }),
             Contains("model_chains: expected no such key") && Contains("optionally model_chain"));
  CHECK_THAT(parse_error([](json& j) { j["cache_probes"] = json::array({{{"frozen_layers", 0}, {"samples", 8}, {"seconds", 1}}}); }),
             Contains("cache_probes[0].frozen_layers: expected an integer >= 1, found 0"));
  CHECK_THAT(parse_error([](json& j) { j["cache_probes"] = json::array({{{"frozen_layers", 2}, {"samples", 8}, {"seconds", 0}}}); }),
             Contains("cache_probes[0].seconds: expected a number > 0 and <= 3600 (one measured operation; an hour is beyond any), found 0"));
  CHECK_THAT(parse_error([](json& j) { j["cache_probes"] = json::array({{{"frozen_layers", 2}, {"seconds", 1}}}); }),
             Contains("cache_probes[0].samples: expected a value"));
  CHECK_THAT(parse_error([](json& j) { j = json::array({1, 2}); }),
             Contains("p.json: top level: expected an object"));
  // Empty optional lists are fine.
  CHECK(parse_error([](json& j) {
          for (const char* k : {"p2p", "allreduce", "cache", "optimizer", "transitions"})
            j[k] = json::array();
        }) == "");
}

TEST_CASE("profile files: not JSON, missing, unwritable", "[profile]") {
  const test::TempDir dir("profile");
  const std::string bad = dir.file("bad.json");
  std::ofstream(bad) << "{\"schema\": oops}";
  CHECK_THAT(test::error_of([&] { (void)read_profile(bad); }),
             Catch::Contains(bad + ": not valid JSON at byte 12"));
  const std::string missing = dir.file("missing.json");
  CHECK_THAT(test::error_of([&] { (void)read_profile(missing); }),
             Catch::Contains(missing + ": cannot open"));
  Profile empty;  // no compute samples
  const std::string out = dir.file("out.json");
  CHECK_THAT(test::error_of([&] { write_profile(empty, out); }),
             Catch::Contains("writing " + out + ": compute: expected at least one sample"));
  CHECK_FALSE(std::filesystem::exists(out));
  Profile ok;
  ok.compute = {{"head", "backward", 2, 1e-3}};
  CHECK_THAT(test::error_of([&] { write_profile(ok, dir.file("no/such/dir/p.json")); }),
             Catch::Contains("cannot open"));
}

TEST_CASE("a profile recorded on another model is refused, naming both", "[profile]") {
  const Config vit = test::paper_config("vit_imagenet");
  const Config bert = test::paper_config("bert_large_squad");
  Profile p;
  p.model = profile_model(vit);
  CHECK(p.model == "vit L=12 H=768 heads=12 I=3072 image=224/16, fp32 on cpu");
  CHECK_NOTHROW(check_profile_model(p, "vit.json", vit));
  try {
    check_profile_model(p, "vit.json", bert);
    FAIL("a ViT profile was accepted for BERT-Large");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CHECK(msg.rfind("vit.json: ", 0) == 0);
    CHECK(msg.find("'vit L=12 H=768 heads=12 I=3072 image=224/16, fp32 on cpu'") != std::string::npos);
    CHECK(msg.find(bert.source + " trains 'bert L=24 H=1024") != std::string::npos);
  }
  // Another shape of the same family is another model too.
  Config wider = vit;
  wider.model.hidden_size = 1024;
  CHECK_THROWS_AS(check_profile_model(p, "vit.json", wider), Error);
  // A CPU fp32 profile times no CUDA bf16 training.
  Config gpu = vit;
  gpu.device = DeviceKind::CUDA;
  gpu.training.precision = Precision::BF16;
  CHECK_THROWS_WITH(check_profile_model(p, "vit.json", gpu), Catch::Contains("trains 'vit L=12 H=768 heads=12 I=3072 "
                                                                            "image=224/16, bf16 on cuda'"));
}
