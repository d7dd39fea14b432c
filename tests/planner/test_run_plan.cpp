// The run planner: deterministic, internally consistent plans over a whole
// training run; chunk search, cache policy and the ablation switches.
#include <catch2/catch.hpp>

#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "planner/cache_policy.hpp"
#include "planner/modes.hpp"
#include "planner/run_loop.hpp"
#include "planner/run_plan.hpp"
#include "tests/planner/support.hpp"

namespace {

using ep::test::paper_config;


ep::RunPlan plan(const ep::Config& c) {
  const ep::AnalyticCostModel cost(c.cluster, c.training);
  return ep::plan_run(c, cost);
}

const char* kPaperConfigs[] = {"vit_imagenet", "vit_cifar100", "bert_large_squad", "bert_base_sst2"};

}  // namespace

TEST_CASE("micro_batch_sizes splits evenly and exactly") {
  std::mt19937 rng(3);
  for (int i = 0; i < 500; ++i) {
    const int M = 1 + rng() % 64;
    const int batch = M + rng() % 500;
    const auto sizes = ep::micro_batch_sizes(batch, M);
    REQUIRE(static_cast<int>(sizes.size()) == M);
    CHECK(std::accumulate(sizes.begin(), sizes.end(), 0) == batch);
    const auto [lo, hi] = std::minmax_element(sizes.begin(), sizes.end());
    CHECK(*hi - *lo <= 1);
    CHECK(std::is_sorted(sizes.rbegin(), sizes.rend()));
  }
  CHECK_THROWS_AS(ep::micro_batch_sizes(3, 4), ep::Error);
}

TEST_CASE("the run plan is deterministic and consistent for every paper config and mode") {
  for (const char* name : kPaperConfigs)
    for (const char* compression : {"paper", "memory", "none"})
      for (const char* partitioner : {"greedy", "optimal"}) {
        const ep::Config c = paper_config(name, {std::string("planner.compression=") + compression,
                                          std::string("planner.partitioner=") + partitioner});
        INFO(name << " " << compression << " " << partitioner);
        const ep::RunPlan a = plan(c), b = plan(c);
        const ep::ModelSpec spec = ep::build_model_spec(c.model, c.training.precision);
        CHECK(ep::to_json(a, spec) == ep::to_json(b, spec));
        REQUIRE(!a.plans.empty());
        CHECK(a.plans.front().first_epoch == 0);
        CHECK(a.plans.back().end_epoch == c.training.epochs);
        const int I = c.cluster.gpus_per_node;
        for (std::size_t i = 0; i < a.plans.size(); ++i) {
          const ep::Plan& p = a.plans[i];
          CHECK(p.epochs() >= 1);
          CHECK(p.partition.K() == p.K * p.v);
          CHECK(p.partition.frozen_layers == p.frozen_layers);
          CHECK(p.partition.bounds.back() == spec.num_sublayers());
          CHECK(p.layout.K == p.K);
          CHECK(p.layout.replicas == c.cluster.nodes * I / p.K);
          CHECK(p.M >= p.K);
          CHECK(p.M <= 6 * p.K);
          CHECK(p.M <= p.batch);
          CHECK(p.iteration_s > 0);
          CHECK(p.bubble_fraction >= 0);
          CHECK(p.bubble_fraction < 1);
          // Every sample once per epoch: the slots are the samples plus the padding.
          CHECK(p.iterations_per_epoch * p.layout.replicas * p.batch ==
                c.data.num_train_samples + p.padding_slots_per_epoch);
          CHECK(p.samples_per_s == Approx(p.layout.replicas * p.batch / p.iteration_s));
          CHECK(p.frozen_layers <= p.frozen_allowed);
          if (i == 0) continue;
          const ep::Plan& prev = a.plans[i - 1];
          CHECK(p.first_epoch == prev.end_epoch);
          CHECK(p.frozen_layers >= prev.frozen_layers);  // bottom-up only
          CHECK(p.K <= prev.K);                          // compression never grows K
          // Without compression K only shrinks when too few sublayers remain.
          if (std::string(compression) == "none")
            for (const auto& a : p.compression.attempts) CHECK_FALSE(a.reason.empty());
          // The processes a transition wakes are exactly the new ranks.
          for (int r : p.woken_ranks) {
            CHECK(std::count(p.layout.active_ranks.begin(), p.layout.active_ranks.end(), r) == 1);
            CHECK(std::count(prev.layout.active_ranks.begin(), prev.layout.active_ranks.end(), r) == 0);
          }
          CHECK(p.woken_ranks.size() == p.layout.active_ranks.size() - prev.layout.active_ranks.size());
        }
        CHECK(a.predicted_total_s() > 0);
      }
}

TEST_CASE("ViT-B/16 on ImageNet with the paper's settings compresses as the plan says") {
  const ep::RunPlan r = plan(paper_config("vit_imagenet", {"planner.objective=paper"}));
  REQUIRE(r.plans.size() == 10);
  CHECK(r.freeze_from_alpha_bound);
  // Eq. 1's bound alone with floor_progress rounding, L = 12, alpha = 1/3.
  const std::vector<int> frozen{0, 4, 6, 8, 9, 10, 11, 11, 11, 11};
  for (std::size_t i = 0; i < frozen.size(); ++i) CHECK(r.plans[i].frozen_layers == frozen[i]);
  // Every attempt says why K is what it is: accepted ones below M_GPU^(0),
  // the last one of a step rejected (or K reached 1).
  for (const ep::Plan& p : r.plans) {
    for (const auto& a : p.compression.attempts) {
      CHECK(a.to_K * 2 == a.from_K);
      if (!a.reason.empty()) continue;  // forced: too few sublayers for K stages
      CHECK(a.limit == Approx(r.compression_limit));
      CHECK(a.accepted == (a.m_gpu < a.limit));
    }
    if (!p.compression.attempts.empty() && p.K > 1) CHECK_FALSE(p.compression.attempts.back().accepted);
  }
  CHECK(r.plans.back().K < r.plans.front().K);
  CHECK(r.plans.back().layout.replicas > r.plans.front().layout.replicas);
}

TEST_CASE("lambda_frozen charges the frozen model to stage 0 and can only slow compression") {
  for (const char* name : kPaperConfigs) {
    INFO(name);
    const ep::RunPlan with = plan(paper_config(name, {"planner.objective=paper"}));
    const ep::RunPlan without = plan(paper_config(name, {"planner.lambda_frozen=0", "planner.objective=paper"}));
    REQUIRE(with.plans.size() == without.plans.size());
    for (std::size_t i = 0; i < with.plans.size(); ++i) CHECK(without.plans[i].K <= with.plans[i].K);
  }
}

TEST_CASE("ablation switches: freeze only keeps the pipeline, AutoDP off keeps the replicas") {
  const ep::RunPlan freeze_only = plan(paper_config("vit_imagenet", {"planner.autopipe=false", "planner.autodp=false"}));
  // Eq. 2 decides K alike with and without AutoDP (the time objective
  // weighs the idle devices and may not).
  const ep::RunPlan no_dp =
      plan(paper_config("vit_imagenet", {"planner.lambda_frozen=0", "planner.autodp=false", "planner.objective=paper"}));
  const ep::RunPlan all = plan(paper_config("vit_imagenet", {"planner.lambda_frozen=0", "planner.objective=paper"}));
  const ep::Partition& initial = freeze_only.plans.front().partition;
  for (const ep::Plan& p : freeze_only.plans) {
    CHECK(p.K == 8);
    CHECK(p.partition.bounds == initial.bounds);  // frozen layers stay in place
    CHECK_FALSE(p.cache.on);                      // nothing separate to cache
    CHECK(p.layout.replicas == 2);
  }
  for (std::size_t i = 0; i < no_dp.plans.size(); ++i) {
    CHECK(no_dp.plans[i].K == all.plans[i].K);
    CHECK(no_dp.plans[i].layout.replicas == 2);
    CHECK(no_dp.plans[i].layout.replicas <= all.plans[i].layout.replicas);
  }
  // Freezing alone already speeds up an iteration (no backward below the boundary).
  CHECK(freeze_only.plans.back().iteration_s < freeze_only.plans.front().iteration_s);
  CHECK(all.predicted_total_s() < freeze_only.predicted_total_s());
}

TEST_CASE("chunk search picks the fastest feasible M in [K, 6K] and memoises per K") {
  // Objective time asks the predictor about its own three best M only.
  for (const ep::Plan& p : plan(paper_config("vit_imagenet")).plans) {
    CHECK(p.chunk_table.size() <= 3);
    if (!p.chunk_table.empty())
      CHECK(std::any_of(p.chunk_table.begin(), p.chunk_table.end(), [&](const auto& c) { return c.M == p.M; }));
  }
  const ep::Config c = paper_config("vit_imagenet", {"planner.objective=paper"});
  const ep::RunPlan r = plan(c);
  for (const ep::Plan& p : r.plans) {
    if (p.chunk_table.empty()) continue;  // decided by an earlier plan with the same K
    CHECK(p.chunk_table.front().M == p.K);
    CHECK(p.chunk_table.back().M == std::min(6 * p.K, c.training.batch_size));
    CHECK(static_cast<int>(p.chunk_table.size()) == p.chunk_table.back().M - p.K + 1);
    for (const auto& cand : p.chunk_table)
      if (cand.feasible) CHECK(cand.iteration_s >= p.chunk_table[p.M - p.K].iteration_s);
  }
  // One table per distinct K; later plans with that K reuse its M.
  std::map<int, int> M_of_K;
  for (const ep::Plan& p : r.plans) {
    if (!M_of_K.count(p.K)) CHECK(!p.chunk_table.empty());
    else CHECK(p.chunk_table.empty());
    M_of_K.emplace(p.K, p.M);
    CHECK(M_of_K[p.K] == p.M);
  }
}

TEST_CASE("a fixed M is used as given") {
  const ep::RunPlan r = plan(paper_config("vit_imagenet", {"planner.chunk_search=false", "planner.M=32"}));
  for (const ep::Plan& p : r.plans) CHECK(p.M == 32);
}

TEST_CASE("the cache policy follows the predicted costs") {
  const ep::Config c = paper_config("vit_imagenet");
  const ep::AnalyticCostModel cost(c.cluster, c.training);
  const ep::ModelSpec spec = ep::build_model_spec(c.model, c.training.precision);
  CHECK_FALSE(ep::decide_cache(c, spec, cost, 0, 400).on);
  for (int f = 1; f < 12; ++f) {
    const ep::CacheDecision d = ep::decide_cache(c, spec, cost, f, 400);
    CHECK(d.on == (d.read_s < d.frozen_forward_s));
    // ImageNet's boundary activations (197 x 768 fp32 per image) outgrow 256 GiB per node.
    CHECK(d.tier == ep::CacheTier::Disk);
    CHECK(d.bytes_per_node == Approx(640584.0 * 197 * 768 * 4));
  }
  // A slow enough disk makes recomputing one frozen layer the better deal.
  const ep::Config slow = paper_config("vit_imagenet", {"cluster.host.disk_bandwidth_bytes_per_s=1e8"});
  const ep::AnalyticCostModel slow_cost(slow.cluster, slow.training);
  CHECK_FALSE(ep::decide_cache(slow, spec, slow_cost, 1, 400).on);
  CHECK(ep::decide_cache(paper_config("vit_imagenet", {"planner.cache=off"}), spec, cost, 4, 400).on == false);
  CHECK(ep::decide_cache(paper_config("vit_imagenet", {"planner.cache=on",
                                                "cluster.host.disk_bandwidth_bytes_per_s=1e8"}),
                         spec, slow_cost, 1, 400).on);
}

TEST_CASE("with data.augment no plan caches: AutoCache weighs no cache and says why") {
  for (const char* name : {"vit_imagenet", "vit_cifar100"}) {
    INFO(name);
    const ep::Config c = ep::mode_config(paper_config(name), ep::Mode::AutoCache);
    const ep::Config augmented =
        ep::mode_config(paper_config(name, {"data.augment=[\"hflip\", \"crop\"]"}), ep::Mode::AutoCache);
    CHECK_FALSE(ep::cache_allowed(augmented));
    CHECK_FALSE(ep::probes_cache(augmented, 4));
    const ep::AnalyticCostModel cost(c.cluster, c.training);
    const ep::ModelSpec spec = ep::build_model_spec(c.model, c.training.precision);
    const ep::CacheDecision d = ep::decide_cache(augmented, spec, cost, 4, 400);
    CHECK_FALSE(d.on);
    CHECK_THAT(d.reason, Catch::Contains("data.augment"));
    CHECK_FALSE(ep::cache_file_ahead(augmented, spec, cost, true));
    // Without it the same run caches somewhere (so the check below can fail).
    const ep::RunPlan with_cache = plan(c);
    CHECK(std::any_of(with_cache.plans.begin(), with_cache.plans.end(), [](const ep::Plan& p) { return p.cache.on; }));
    const ep::RunPlan r = plan(augmented);
    REQUIRE(r.plans.size() > 1);
    for (const ep::Plan& p : r.plans) {
      CHECK_FALSE(p.cache.on);
      CHECK(p.fill_program.empty());
      for (const ep::Alternative& a : p.alternatives) CHECK_FALSE(a.cache);
      if (p.frozen_layers > 0) CHECK_THAT(p.cache.reason, Catch::Contains("data.augment"));
    }
  }
}

TEST_CASE("the JSON form carries every plan field under a versioned schema") {
  const ep::Config c = paper_config("bert_base_sst2");
  const ep::ModelSpec spec = ep::build_model_spec(c.model, c.training.precision);
  const ep::RunPlan r = plan(c);
  const nlohmann::json j = ep::to_json(r, spec);
  CHECK(j["schema"] == "elasticpipe.plan/2");
  REQUIRE(j["plans"].size() == r.plans.size());
  for (std::size_t i = 0; i < r.plans.size(); ++i) {
    const auto& jp = j["plans"][i];
    CHECK(jp["K"] == r.plans[i].K);
    CHECK(jp["M"] == r.plans[i].M);
    CHECK(jp["replicas"] == r.plans[i].layout.replicas);
    CHECK(jp["stages"].size() == static_cast<std::size_t>(r.plans[i].partition.K()));
    CHECK(jp["frozen_layers"] == r.plans[i].frozen_layers);
  }
}

TEST_CASE("the predicted iteration of a schedule is its simulated makespan") {
  const ep::Config c = paper_config("bert_base_sst2");
  const ep::AnalyticCostModel cost(c.cluster, c.training);
  const ep::PlanContext ctx(c, cost);
  ep::IterationSetup s{ep::plan_partition(ctx, 0, 8, false), 8, 1, 16, 2, true, false, ep::CacheTier::HostMemory, -1,
                       c.training.batch_size};
  const ep::Schedule sched = ep::build_schedule(ep::schedule_options(ctx, s));
  REQUIRE_NOTHROW(ep::check_schedule(sched));
  const ep::Timeline t = ep::predict_iteration(ctx, s);
  CHECK(t.makespan == ep::simulate(sched, ep::iteration_costs(ctx, s).duration).makespan);
  // No faster than the slowest stage's compute for all micro-batches.
  const auto durations = ep::iteration_costs(ctx, s).duration;
  for (const auto& device : sched.devices) {
    double busy = 0;
    for (const auto& a : device)
      if (a.kind == ep::ActionKind::Forward || a.kind == ep::ActionKind::Backward) busy += durations(a);
    CHECK(t.makespan >= busy);
  }
}

TEST_CASE("the cache is filled once, then advanced only when the boundary moves") {
  const ep::RunPlan r = plan(paper_config("vit_imagenet"));
  int cached = 0;  // the depth the entries hold
  for (std::size_t i = 0; i < r.plans.size(); ++i) {
    const ep::Plan& p = r.plans[i];
    if (!p.cache.on) {
      CHECK(p.cache_fill_from == -1);
      continue;
    }
    const bool moved = i == 0 || !r.plans[i - 1].cache.on || r.plans[i - 1].frozen_layers != p.frozen_layers;
    CHECK(p.cache_fill_from == (moved ? cached : -1));
    if (moved) {
      CHECK(p.fill_iteration_s > 0);
      CHECK(p.fill_iteration_s > p.iteration_s);  // filling costs more than reading
    }
    cached = p.frozen_layers;
  }
}

TEST_CASE("iteration costs: a send and its receive move the same bytes, frozen stages get no gradient") {
  for (const char* autopipe : {"true", "false"}) {
    const ep::Config c = paper_config("bert_base_sst2", {std::string("planner.autopipe=") + autopipe});
    const ep::AnalyticCostModel cost(c.cluster, c.training);
    const ep::PlanContext ctx(c, cost);
    for (int frozen : {0, 3, 5}) {
      ep::IterationSetup s{ep::plan_partition(ctx, frozen, 8, false), 8, 1, 16, 2, true, false,
                           ep::CacheTier::HostMemory, -1, c.training.batch_size};
      const ep::IterationCosts costs = ep::iteration_costs(ctx, s);
      const ep::Schedule sched = ep::build_schedule(ep::schedule_options(ctx, s));
      for (const auto& device : sched.devices)
        for (const ep::Action& a : device) {
          INFO(ep::to_string(a) << " autopipe=" << autopipe << " frozen=" << frozen);
          CHECK(costs.bytes(a) >= 0);
          CHECK(costs.duration(a) >= 0);
          if (a.kind == ep::ActionKind::SendAct)
            CHECK(costs.bytes(a) == costs.bytes({ep::ActionKind::RecvAct, a.stage + 1, a.microbatch}));
          if (a.kind == ep::ActionKind::SendGrad)
            CHECK(costs.bytes(a) == costs.bytes({ep::ActionKind::RecvGrad, a.stage - 1, a.microbatch}));
          const bool frozen_below = s.partition.bounds[a.stage] < s.partition.frozen_end;
          if (a.kind == ep::ActionKind::SendGrad && frozen_below) CHECK(costs.bytes(a) == 0);
          if (a.kind == ep::ActionKind::Forward || a.kind == ep::ActionKind::Backward) CHECK(costs.bytes(a) == 0);
        }
    }
  }
}

TEST_CASE("advancing stale cache entries runs only the newly frozen layers") {
  const ep::Config c = paper_config("vit_imagenet");
  const ep::AnalyticCostModel cost(c.cluster, c.training);
  const ep::PlanContext ctx(c, cost);
  ep::IterationSetup s{ep::plan_partition(ctx, 8, 4, true), 4, 1, 8, 4, true, true, ep::CacheTier::Disk, 0,
                       c.training.batch_size};
  const ep::Action fz{ep::ActionKind::FrozenForward, 0, 0};
  const ep::Action cr{ep::ActionKind::CacheRead, 0, 0};
  const double full = ep::iteration_costs(ctx, s).duration(fz);
  s.cache_valid_layers = 6;
  const ep::IterationCosts adv = ep::iteration_costs(ctx, s);
  // 2 of the 8 frozen layers are new: a quarter of the work, give or take the stem.
  CHECK(adv.duration(fz) < 0.3 * full);
  CHECK(adv.duration(fz) > 0.2 * full);
  CHECK(adv.bytes(cr) == adv.bytes({ep::ActionKind::CacheWrite, 0, 0}));  // same shape at every boundary
  CHECK(ep::schedule_options(ctx, s).frozen_input == ep::FrozenInput::Advance);
  s.cache_valid_layers = -1;
  CHECK(ep::schedule_options(ctx, s).frozen_input == ep::FrozenInput::CacheRead);
}

namespace {

// One random trial of a GPU config's cache copies: host memory from 1 GB/s
// down to 100 kB/s (the copies from hidden beside the device to pacing it),
// a pipeline of K stages, M micro-batches and a frozen prefix, drawn in
// that order.
struct GpuCacheTrial {
  explicit GpuCacheTrial(std::mt19937& rng)
      : host_bw(std::pow(10.0, 9.0 - 4.0 * (rng() % 1000) / 1000.0)),
        c(paper_config("vit_imagenet", {"exec.device=\"cuda\"",
                                        "cluster.host.memory_bandwidth_bytes_per_s=" + std::to_string(host_bw)})),
        cost(c.cluster, c.training),
        ctx(c, cost),
        K(1 << (rng() % 3)),
        M(K << (rng() % 2)),
        frozen(2 + static_cast<int>(rng() % 7)) {}
  const double host_bw;
  const ep::Config c;
  const ep::AnalyticCostModel cost;
  const ep::PlanContext ctx;
  const int K, M, frozen;
};

}  // namespace

// Over random setups: a write behind the device is the same write, moved
// from the device's list to the writer's, which paces iterations only
// where it is the slower of the two.
TEST_CASE("cache writes behind the device cost it nothing, and iterations cannot outpace the writer") {
  std::mt19937 rng(5);
  int writer_bound = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const GpuCacheTrial trial_setup(rng);  // the writer from hidden to pacing
    const auto& [host_bw, c, cost, ctx, K, M, frozen] = trial_setup;
    REQUIRE(ep::cache_writes_behind(c));
    ep::IterationSetup now{ep::plan_partition(ctx, frozen, K, true), K, 1, M, 1, false, true,
                           rng() % 2 ? ep::CacheTier::Disk : ep::CacheTier::HostMemory,
                           static_cast<int>(rng() % frozen), c.training.batch_size};
    ep::IterationSetup behind = now;
    behind.cache_writes_behind = true;
    INFO("trial " << trial << " K=" << K << " M=" << M << " frozen=" << frozen << " host_bw=" << host_bw);
    const ep::IterationCosts a = ep::iteration_costs(ctx, now), b = ep::iteration_costs(ctx, behind);
    const ep::Schedule sched = ep::build_schedule(ep::schedule_options(ctx, behind));
    double writer = 0, written_now = 0;
    int writes = 0;
    for (const auto& device : sched.devices) {
      double on_device = 0;
      for (const ep::Action& x : device) {
        CHECK(a.behind(x) == 0);
        if (x.kind == ep::ActionKind::CacheWrite) {
          ++writes;
          CHECK(b.duration(x) == 0);
          CHECK(b.behind(x) == a.duration(x));
          on_device += b.behind(x);
          written_now += a.duration(x);
        } else {
          CHECK(b.duration(x) == a.duration(x));
          CHECK(b.behind(x) == 0);
        }
      }
      writer = std::max(writer, on_device);
    }
    CHECK(writes == M);
    const double t_now = ep::predict_iteration(ctx, now).makespan;
    const double t_behind = ep::predict_iteration(ctx, behind).makespan;
    const double device_only = ep::simulate(sched, b.duration).makespan;
    CHECK(t_behind == std::max(device_only, writer));
    CHECK(t_behind <= t_now * (1 + 1e-12));
    CHECK(device_only >= t_now - written_now - 1e-12 * t_now);
    if (writer > device_only) ++writer_bound;
  }
  CHECK(writer_bound > 5);
  CHECK(writer_bound < 35);
}

// Over random setups: a cache copy alone takes the cost model's time; the
// node's replicas copy at the same point of the same schedule, so each
// takes at least their bytes together over the node's memory link (disk).
TEST_CASE("the node's replicas copying the cache at once share its memory link and disk") {
  std::mt19937 rng(11);
  int shared = 0, alone = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const int nodes = 1 << (rng() % 3), K = 1 << (rng() % 3);
    const int per_node = 1 << (rng() % (4 - (K == 1 ? 0 : K == 2 ? 1 : 2)));  // divides 8 / K
    const double mem_bw = std::pow(10.0, 9.0 + 2.0 * (rng() % 1000) / 1000.0);  // 1 to 100 GB/s
    const ep::Config c = paper_config("vit_imagenet", {"cluster.nodes=" + std::to_string(nodes),
                                                        "cluster.host.memory_bandwidth_bytes_per_s=" +
                                                            std::to_string(mem_bw)});
    const ep::AnalyticCostModel cost(c.cluster, c.training);
    const ep::PlanContext ctx(c, cost);
    const ep::CacheTier tier = rng() % 2 ? ep::CacheTier::Disk : ep::CacheTier::HostMemory;
    const int frozen = 2 + static_cast<int>(rng() % 7);
    ep::IterationSetup s{ep::plan_partition(ctx, frozen, K, true), K, 1, K, nodes * per_node, nodes > 1, true,
                         tier, static_cast<int>(rng() % frozen), c.training.batch_size};
    s.cache_writes_behind = rng() % 2;
    INFO("trial " << trial << " nodes=" << nodes << " K=" << K << " per_node=" << per_node << " mem_bw=" << mem_bw);
    REQUIRE(ep::cache_copiers_per_node(c.cluster, s) == per_node);
    const ep::HostSpec& host = c.cluster.host;
    const double node_bw = tier == ep::CacheTier::HostMemory
                               ? host.memory_bandwidth_bytes_per_s
                               : std::min(host.memory_bandwidth_bytes_per_s, host.disk_bandwidth_bytes_per_s);
    const ep::IterationCosts costs = ep::iteration_costs(ctx, s);
    ep::IterationSetup one = s;
    one.replicas = nodes;
    const ep::IterationCosts single = ep::iteration_costs(ctx, one);
    for (const ep::ActionKind kind : {ep::ActionKind::CacheRead, ep::ActionKind::CacheWrite}) {
      const ep::Action x{kind, 0, 0};
      const bool read = kind == ep::ActionKind::CacheRead;
      const double bytes = costs.bytes(x);
      REQUIRE(bytes > 0);
      const double own = read ? cost.cache_read_s(bytes, tier) : cost.cache_write_s(bytes, tier);
      CHECK(costs.alone(x) == own);
      const double charged = costs.duration(x) + costs.behind(x);  // one of them is 0
      CHECK(charged == std::max(own, per_node * bytes / node_bw));
      CHECK(single.duration(x) + single.behind(x) == own);  // one replica per node copies alone
      (charged > own ? shared : alone) += 1;
    }
  }
  CHECK(shared > 10);
  CHECK(alone > 10);
}

TEST_CASE("cache reads ahead cost the device nothing: the iteration is its compute, or its reads where they take longer") {
  std::mt19937 rng(29);
  int reader_bound = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const GpuCacheTrial trial_setup(rng);  // the reads from hidden to pacing
    const auto& [host_bw, c, cost, ctx, K, M, frozen] = trial_setup;
    REQUIRE(ep::cache_reads_ahead(c));
    // Steady state (CR) or advancing the cache (CR, FZ, CW), writes behind as on a GPU.
    ep::IterationSetup now{ep::plan_partition(ctx, frozen, K, true), K, 1, M, 1, false, true,
                           rng() % 2 ? ep::CacheTier::Disk : ep::CacheTier::HostMemory,
                           rng() % 2 ? -1 : 1 + static_cast<int>(rng() % (frozen - 1)), c.training.batch_size};
    now.cache_writes_behind = true;
    ep::IterationSetup ahead = now;
    ahead.cache_reads_ahead = true;
    INFO("trial " << trial << " K=" << K << " M=" << M << " frozen=" << frozen << " host_bw=" << host_bw);
    const ep::IterationCosts a = ep::iteration_costs(ctx, now), b = ep::iteration_costs(ctx, ahead);
    const ep::Schedule sched = ep::build_schedule(ep::schedule_options(ctx, ahead));
    double reader = 0, writer = 0;
    int reads = 0;
    for (const auto& device : sched.devices) {
      double read_here = 0, written_here = 0;
      for (const ep::Action& x : device) {
        if (x.kind == ep::ActionKind::CacheRead) {
          ++reads;
          CHECK(b.duration(x) == 0);
          CHECK(b.behind(x) == a.duration(x));
          CHECK(a.behind(x) == 0);
          read_here += b.behind(x);
        } else {
          CHECK(b.duration(x) == a.duration(x));
          CHECK(b.behind(x) == a.behind(x));
          written_here += b.behind(x);
        }
      }
      reader = std::max(reader, read_here);
      writer = std::max(writer, written_here);
    }
    CHECK(reads == M);
    const double t_now = ep::predict_iteration(ctx, now).makespan;
    const double t_ahead = ep::predict_iteration(ctx, ahead).makespan;
    const double device_only = ep::simulate(sched, b.duration).makespan;
    CHECK(t_ahead == std::max({device_only, reader, writer}));
    CHECK(t_ahead <= t_now * (1 + 1e-12));
    if (reader > std::max(device_only, writer)) ++reader_bound;
  }
  CHECK(reader_bound > 3);
  CHECK(reader_bound < 37);
}

TEST_CASE("the plan stores cache writes behind the device and reads ahead of it on GPUs only") {
  for (const bool cuda : {false, true}) {
    const ep::Config c = paper_config("vit_imagenet", {cuda ? "exec.device=\"cuda\"" : "exec.device=\"cpu\""});
    const ep::RunPlan r = plan(c);
    int cached = 0;
    for (const ep::Plan& p : r.plans) {
      for (const bool fill : {false, true}) {
        CHECK(ep::iteration_setup(c, p, fill).cache_writes_behind == (cuda && p.cache.on));
        CHECK(ep::iteration_setup(c, p, fill).cache_reads_ahead == (cuda && p.cache.on));
      }
      cached += p.cache.on;
    }
    CHECK(cached > 0);
  }
}

TEST_CASE("RunPlanner stepped with measured frozen counts plans what plan_run plans from them") {
  // The executor steps the planner with the counts its gradient norms decide;
  // replaying those counts ahead of time must give the same plans.
  std::mt19937 rng(11);
  for (int trial = 0; trial < 6; ++trial) {
    const ep::Config c = paper_config(kPaperConfigs[trial % 4]);
    const int L = c.model.num_hidden_layers;
    std::vector<int> frozen{0};
    for (int T = 1; T < c.training.epochs; ++T)
      frozen.push_back(std::min(L - c.planner.min_active_layers, frozen.back() + static_cast<int>(rng() % 4)));
    std::string replay = "planner.replay_frozen=[";
    for (std::size_t T = 1; T < frozen.size(); ++T) replay += (T > 1 ? "," : "") + std::to_string(frozen[T]);
    // The same config on both sides: its policy is what the planner expects
    // of later steps when it decides whether to act on one.
    const ep::Config r = paper_config(kPaperConfigs[trial % 4], {"planner.freeze_policy=\"replay\"", replay + "]"});
    const ep::AnalyticCostModel cost(r.cluster, r.training);
    ep::RunPlanner stepped(r, cost);
    REQUIRE(stepped.freeze_steps() + 1 == static_cast<int>(frozen.size()));
    for (const int f : frozen) stepped.next(f);
    const ep::RunPlan ahead = plan(r);
    REQUIRE(ahead.plans.size() == stepped.run().plans.size());
    for (std::size_t T = 0; T < frozen.size(); ++T) {
      const ep::Plan& a = ahead.plans[T];
      const ep::Plan& b = stepped.run().plans[T];
      CHECK(a.frozen_layers == b.frozen_layers);
      CHECK(a.frozen_allowed == frozen[T]);
      CHECK(a.K == b.K);
      CHECK(a.M == b.M);
      CHECK(a.partition.bounds == b.partition.bounds);
      CHECK(a.iteration_s == b.iteration_s);
    }
  }
}

TEST_CASE("RunPlanner refuses a frozen count that goes backwards or past the last step") {
  const ep::Config c = paper_config("vit_cifar100");
  const ep::AnalyticCostModel cost(c.cluster, c.training);
  ep::RunPlanner p(c, cost);
  p.next(0);
  p.next(3);
  CHECK_THROWS_WITH(p.next(2), Catch::Contains("2 frozen layers, expected 3.."));
  while (static_cast<int>(p.run().plans.size()) <= p.freeze_steps()) p.next(3);
  CHECK_THROWS_WITH(p.next(3), Catch::Contains("past the last one"));
}

// Calls fn(name, objective override, config) for every paper config under
// both objectives with training.batch_policy = `policy`.
template <class F>
void for_paper_configs_with_policy(const char* policy, F&& fn) {
  const std::string policy_set = std::string("training.batch_policy=\"") + policy + "\"";
  for (const char* objective : {"time", "paper"})
    for (const char* name : kPaperConfigs) {
      CAPTURE(objective, name);
      const std::string obj = std::string("planner.objective=\"") + objective + "\"";
      fn(name, obj, paper_config(name, {obj, policy_set}));
    }
}

TEST_CASE("global: the replicas split the global batch of planner.K's layout, so every plan makes the same updates") {
  for_paper_configs_with_policy("global", [](const char* name, const std::string& obj, const ep::Config& c) {
    const std::int64_t global =
        static_cast<std::int64_t>(c.training.batch_size) * ep::replica_layout(c, c.planner.K).replicas;
    const ep::RunPlan r = plan(c);
    for (const ep::Plan& p : r.plans) {
      CAPTURE(p.id, p.K, p.layout.replicas);
      CHECK(p.batch == ep::pipeline_batch(c, p.K));
      // Rounded up: at least the global batch, less than one sample per replica more.
      CHECK(static_cast<std::int64_t>(p.batch) * p.layout.replicas >= global);
      CHECK(static_cast<std::int64_t>(p.batch - 1) * p.layout.replicas < global);
      CHECK(p.lr_scale == 1.0);
      CHECK(ep::iteration_setup(c, p, false).batch == p.batch);
      CHECK(p.M <= p.batch);
      // Same global batch, same updates per epoch (the paper configs' batches divide evenly).
      if (static_cast<std::int64_t>(p.batch) * p.layout.replicas == global)
        CHECK(p.iterations_per_epoch == r.plans.front().iterations_per_epoch);
      CHECK(p.samples_per_s == Approx(p.layout.replicas * static_cast<double>(p.batch) / p.iteration_s));
    }
    for (const ep::Plan& p : plan(paper_config(name, {obj, "training.batch_policy=\"per_pipeline\""})).plans)
      CHECK(p.batch == c.training.batch_size);
  });
}

TEST_CASE("lr_scaled scales lr by the replicas over those of planner.K, from the first plan on") {
  for_paper_configs_with_policy("lr_scaled", [](const char* name, const std::string& obj, const ep::Config& c) {
    const int reference = ep::replica_layout(c, c.planner.K).replicas;
    const ep::RunPlan r = plan(c);
    for (const ep::Plan& p : r.plans)
      CHECK(p.lr_scale * reference == Approx(p.layout.replicas).epsilon(1e-12));
    if (c.planner.objective == ep::Objective::Paper) CHECK(r.plans.front().lr_scale == 1.0);
    for (const ep::Plan& p : plan(paper_config(name, {obj, "training.batch_policy=\"per_pipeline\""})).plans)
      CHECK(p.lr_scale == 1.0);
  });
}

namespace {

// The analytic model, but a sublayer's forward again in one iteration costs
// a quarter of its first (bf16 weight copies reused), its frozen forward
// half.
class CheapAgain final : public ep::CostModel {
 public:
  explicit CheapAgain(const ep::AnalyticCostModel& base) : base_(base) {}
  std::string name() const override { return "cheap-again"; }
  double forward_s(const ep::Sublayer& s, int b) const override { return base_.forward_s(s, b); }
  double forward_again_s(const ep::Sublayer& s, int b) const override { return 0.25 * base_.forward_s(s, b); }
  double backward_s(const ep::Sublayer& s, int b) const override { return base_.backward_s(s, b); }
  double frozen_forward_s(const ep::Sublayer& s, int b) const override { return 0.5 * base_.forward_s(s, b); }
  double p2p_s(double x, ep::LinkKind k) const override { return base_.p2p_s(x, k); }
  double allreduce_s(double x, int n, ep::LinkKind k) const override { return base_.allreduce_s(x, n, k); }
  double cache_read_s(double x, ep::CacheTier t) const override { return base_.cache_read_s(x, t); }
  double cache_write_s(double x, ep::CacheTier t) const override { return base_.cache_write_s(x, t); }
  double optimizer_step_s(double x) const override { return base_.optimizer_step_s(x); }

 private:
  const ep::AnalyticCostModel& base_;
};

}  // namespace

TEST_CASE("iteration costs: a stage's first micro-batch pays its forward, later ones and recomputes the forward again") {
  for (const char* ckpt : {"never", "except_last", "always"}) {
    const ep::Config c = paper_config("vit_imagenet", {std::string("training.checkpointing=\"") + ckpt + "\""});
    const ep::AnalyticCostModel analytic(c.cluster, c.training);
    const CheapAgain cheap(analytic);
    const ep::PlanContext ctx(c, cheap);
    for (const bool in_stages : {false, true}) {
      // 4 of 12 layers frozen, on device 0 or hosted by the stages that hold them.
      const ep::Partition p = ep::partition_by_time(ctx, 4, 4, false, ep::CacheTier::HostMemory, 8,
                                                    in_stages ? ep::FrozenPlacement::InStages : ep::FrozenPlacement::Device0);
      const ep::IterationSetup s{p, 4, 1, 8, 1, false, false, ep::CacheTier::HostMemory, -1, 64};
      const ep::IterationCosts costs = ep::iteration_costs(ctx, s);
      for (int st = 0; st < p.K(); ++st)
        for (int m = 0; m < s.M; ++m) {
          INFO("checkpointing " << ckpt << ", stage " << st << ", micro-batch " << m << ", in stages " << in_stages);
          const double f = ep::stage_forward_s(analytic, ctx.spec, p.active(st), 8);  // the first forward, in full
          REQUIRE(f > 0);
          const bool recomputed = ep::recomputes(c.training.checkpointing, m, s.M);
          CHECK(recomputed == (std::string(ckpt) == "always" || (std::string(ckpt) == "except_last" && m + 1 < s.M)));
          // Trained sublayers: the first in full, later ones a quarter; a recomputed micro-batch's first
          // forward has no autograd (half), and its backward runs the forward again. A hosted frozen
          // forward is paid in full every time (half of the analytic).
          const ep::SublayerRange hosted = in_stages ? p.hosted_frozen(st) : ep::SublayerRange{};
          const double frozen = 0.5 * ep::stage_forward_s(analytic, ctx.spec, hosted, 8);
          const double first = recomputed ? 0.5 * f : m == 0 ? f : 0.25 * f;
          CHECK(costs.duration({ep::ActionKind::Forward, st, m}) == Approx(first + frozen));
          CHECK(costs.duration({ep::ActionKind::Backward, st, m}) ==
                Approx(ep::stage_backward_s(analytic, ctx.spec, p.active(st), 8) + (recomputed ? 0.25 * f : 0.0)));
        }
    }
  }
}
