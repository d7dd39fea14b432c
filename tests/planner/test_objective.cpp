// The time objective: K, partition, M, replicas and cache chosen together
// for the least predicted time to the end of training; never slower than the
// paper's proxies, never a switch the model predicts slower than keeping
// the current plan. And what the plan carries for the back ends.
#include <catch2/catch.hpp>

#include <random>
#include <string>

#include "planner/modes.hpp"
#include "planner/run_plan.hpp"
#include "planner/transition.hpp"
#include "tests/planner/support.hpp"

namespace {

using ep::test::paper_config;
using ep::test::tiny_bert;

ep::RunPlan plan(const ep::Config& c) {
  const ep::AnalyticCostModel cost(c.cluster, c.training);
  return ep::plan_run(c, cost);
}

// The whole run as the planner predicts it: every epoch and every transition.
double whole_run_s(const ep::RunPlan& r) {
  double t = r.predicted_total_s();
  for (const ep::Plan& p : r.plans) t += p.predicted_transition_s;
  return t;
}

const char* kPaperConfigs[] = {"vit_imagenet", "vit_cifar100", "bert_large_squad", "bert_base_sst2"};

// A random small experiment: cluster shape, depth, batch, policies.
ep::Config random_config(std::mt19937& rng) {
  const int I = 1 << (rng() % 4);
  const int nodes = 1 + static_cast<int>(rng() % 2);
  const int L = 2 + static_cast<int>(rng() % 7);
  int K = 1 << (rng() % 4);
  while (K > I || K > 2 * L) K /= 2;
  const char* cache[] = {"off", "on", "auto"};
  const char* ckpt[] = {"never", "except_last", "always"};
  const char* schedule[] = {"gpipe", "1f1b", "looping_bf", "looping_df"};
  const int sched = static_cast<int>(rng() % 4);
  const int v = sched >= 2 && 2 * K <= 2 * L ? 2 : 1;
  ep::Overrides o{"cluster.gpus_per_node=" + std::to_string(I),
                  "cluster.nodes=" + std::to_string(nodes),
                  "model.num_hidden_layers=" + std::to_string(L),
                  "planner.K=" + std::to_string(K),
                  "training.batch_size=" + std::to_string(8 + rng() % 40),
                  "training.epochs=" + std::to_string(2 + rng() % 5),
                  "planner.alpha=" + std::to_string(0.2 + 0.1 * (rng() % 4)),
                  std::string("planner.cache=") + cache[rng() % 3],
                  std::string("training.checkpointing=") + ckpt[rng() % 3],
                  std::string("planner.schedule=") + schedule[v == 2 ? sched : sched % 2],
                  "planner.virtual_stages=" + std::to_string(v),
                  std::string("planner.autodp=") + (rng() % 4 ? "true" : "false")};
  ep::Config c = tiny_bert(o);
  // The chunk search over [K, f K] (the file fixes M = 8, and a key cannot
  // be unset from the command line).
  c.planner.chunk_search = true;
  c.planner.M = 0;
  c.planner.M_max_factor = 1 + static_cast<int>(rng() % 4);
  return c;
}

}  // namespace

TEST_CASE("objective time: on the paper's configs every ablation mode is at least as fast as the paper's proxies") {
  for (const char* name : kPaperConfigs) {
    INFO(name);
    const ep::Config time_c = paper_config(name);
    const ep::Config paper_c = paper_config(name, {"planner.objective=paper"});
    REQUIRE(time_c.planner.objective == ep::Objective::Time);
    for (const ep::Mode m : {ep::Mode::Freeze, ep::Mode::AutoPipe, ep::Mode::AutoDP, ep::Mode::AutoCache}) {
      INFO(ep::to_string(m));
      CHECK(whole_run_s(plan(ep::mode_config(time_c, m))) <= whole_run_s(plan(ep::mode_config(paper_c, m))) * (1 + 1e-9));
    }
    // Repartitioning is chosen only when it pays: freeze + AutoPipe is never
    // slower than freezing alone (the paper's proxies make it slower).
    CHECK(whole_run_s(plan(ep::mode_config(time_c, ep::Mode::AutoPipe))) <=
          whole_run_s(plan(ep::mode_config(time_c, ep::Mode::Freeze))) * (1 + 1e-9));
  }
}

TEST_CASE("objective time: the chosen plan is the fastest confirmed alternative, keeping the current one is weighed, "
          "and the plan carries what back ends act on") {
  std::mt19937 rng(2024);
  for (int trial = 0; trial < 60; ++trial) {
    const ep::Config c = random_config(rng);
    INFO("trial " << trial << ": L " << c.model.num_hidden_layers << ", " << c.cluster.nodes << "x"
                  << c.cluster.gpus_per_node << ", K " << c.planner.K << ", batch " << c.training.batch_size
                  << ", cache " << ep::to_string(c.planner.cache) << ", autodp " << c.planner.autodp);
    const ep::RunPlan r = plan(c);
    const ep::AnalyticCostModel cost(c.cluster, c.training);
    const ep::PlanContext ctx(c, cost);
    const std::vector<int> reachable = ep::reachable_K(c);
    for (std::size_t i = 0; i < r.plans.size(); ++i) {
      const ep::Plan& p = r.plans[i];
      const ep::Plan* prev = i ? &r.plans[i - 1] : nullptr;
      INFO("T " << p.freeze_step << ", K " << p.K << ", M " << p.M << ", cache " << p.cache.on);
      REQUIRE_FALSE(p.alternatives.empty());
      int chosen = 0;
      for (const ep::Alternative& a : p.alternatives) {
        if (!a.chosen) continue;
        ++chosen;
        CHECK(a.K == p.K);
        CHECK(a.M == p.M);
        CHECK(a.replicas == p.layout.replicas);
        CHECK(a.cache == p.cache.on);
        CHECK(a.confirmed);
        // The least of the confirmed by the time to the end with the later
        // steps in view (a kept plan among them).
        CHECK(a.to_end_s > 0);
        for (const ep::Alternative& b : p.alternatives)
          if (b.confirmed && b.fits_memory && a.fits_memory) CHECK(a.to_end_s <= b.to_end_s * (1 + 1e-12));
      }
      CHECK(chosen == 1);
      // K never grows and stays among the ones the run can reach (the
      // executor starts one process per device of those layouts).
      CHECK(std::count(reachable.begin(), reachable.end(), p.K) == 1);
      if (prev) {
        CHECK(p.K <= prev->K);
        // Keeping the current K, replicas and cache setting was weighed.
        const bool kept_weighed =
            std::any_of(p.alternatives.begin(), p.alternatives.end(), [&](const ep::Alternative& a) {
              return a.K == prev->K && a.replicas == prev->layout.replicas && a.cache == prev->cache.on;
            });
        // (Possible when the active sublayers still fill K * v stages with
        // F_frozen on stage 0's device, which the cache needs.)
        const int units = 2 * (c.model.num_hidden_layers - p.frozen_layers);
        if (c.planner.cache != ep::CachePolicyKind::On && prev->K * c.planner.virtual_stages <= units)
          CHECK(kept_weighed);
      }
      // What the plan carries, each derived once here.
      CHECK(p.predicted_transition_s == Approx(ep::predict_transition(ctx, prev, p).total_s()));
      CHECK(p.recomputed_microbatches == ep::recomputed_microbatches(c.training.checkpointing, p.M));
      REQUIRE(p.onboarding.size() == p.woken_ranks.size());
      for (std::size_t w = 0; w < p.woken_ranks.size(); ++w) {
        CHECK(p.onboarding[w].rank == p.woken_ranks[w]);
        REQUIRE(prev);
        const auto& live = prev->layout.active_ranks;
        CHECK(std::count(live.begin(), live.end(), p.onboarding[w].source) == 1);
        const auto node_of = [](const ep::ReplicaLayout& l, int rank) {
          for (const auto& rep : l.replica)
            if (rep.rank == rank) return rep.node;
          return -1;
        };
        const int node = node_of(p.layout, p.woken_ranks[w]);
        const bool local_exists = std::any_of(live.begin(), live.end(), [&](int q) { return node_of(p.layout, q) == node; });
        if (local_exists) CHECK(node_of(p.layout, p.onboarding[w].source) == node);
      }
      for (int e = p.first_epoch; e < p.end_epoch; ++e) {
        const ep::CacheRole role = p.cache_role(e);
        CHECK((role == ep::CacheRole::Off) == !p.cache.on);
        if (p.cache.on) CHECK((role == ep::CacheRole::Read) == (e > p.first_epoch || p.cache_fill_from < 0));
      }
    }
  }
}

TEST_CASE("objective time: planner.K is the longest pipeline allowed, a shorter one with more replicas from the start") {
  // The tiny BERT fits one device: pure data parallelism, each replica with
  // its own batch (the paper's batch policy), is predicted faster than the
  // K = 4 pipeline the paper starts with.
  const ep::RunPlan time = plan(tiny_bert({"training.batch_policy=\"per_pipeline\""}));
  const ep::RunPlan paper = plan(tiny_bert({"planner.objective=paper", "training.batch_policy=\"per_pipeline\""}));
  CHECK(paper.plans.front().K == 4);
  CHECK(time.plans.front().K == 1);
  CHECK(time.plans.front().layout.replicas == 4);
  CHECK(whole_run_s(time) < whole_run_s(paper));
  // compression = "none" keeps the pipeline length; without AutoPipe nothing moves.
  for (const ep::Plan& p : plan(tiny_bert({"planner.compression=\"none\""})).plans) CHECK(p.K == 4);
  const ep::RunPlan fixed = plan(tiny_bert({"planner.autopipe=false"}));
  for (const ep::Plan& p : fixed.plans) {
    CHECK(p.K == 4);
    CHECK(p.partition.bounds == fixed.plans.front().partition.bounds);
  }
}

TEST_CASE("reachable_K: every K a plan of the run takes, and no other") {
  std::mt19937 rng(8);
  for (int trial = 0; trial < 40; ++trial) {
    ep::Config c = random_config(rng);
    if (trial % 3 == 0) c = tiny_bert({"planner.compression=\"none\"", "model.num_hidden_layers=2",
                                       "planner.K=4", "training.epochs=4"});
    const std::vector<int> reachable = ep::reachable_K(c);
    for (const char* objective : {"time", "paper"}) {
      ep::Config o = c;
      o.planner.objective = std::string(objective) == "time" ? ep::Objective::Time : ep::Objective::Paper;
      for (const ep::Plan& p : plan(o).plans) CHECK(std::count(reachable.begin(), reachable.end(), p.K) == 1);
    }
  }
  // Without compression the only halving is forced: 2 layers, min_active 1,
  // leaves 2 sublayers for 4 stages.
  const ep::Config forced = tiny_bert({"planner.compression=\"none\"", "model.num_hidden_layers=2", "training.epochs=4"});
  CHECK(ep::reachable_K(forced) == std::vector<int>{4, 2});
  CHECK(ep::reachable_K(tiny_bert({"planner.autopipe=false"})) == std::vector<int>{4});
}

TEST_CASE("the alpha bound reaches L - min_active_layers with the default rounding") {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 50; ++trial) {
    const int L = 2 + static_cast<int>(rng() % 23);
    const int min_active = 1 + static_cast<int>(rng() % std::min(L, 3));
    const double alpha = 0.1 + 0.8 * (rng() % 1000) / 1000.0;
    const ep::Config c = tiny_bert({"model.num_hidden_layers=" + std::to_string(L),
                                    "planner.min_active_layers=" + std::to_string(min_active),
                                    "planner.alpha=" + std::to_string(alpha)});
    const ep::FreezeTimeline t = ep::freeze_timeline(c, L + 2);
    INFO("L " << L << ", min_active " << min_active << ", alpha " << alpha);
    CHECK(t.frozen.back() == L - min_active);
    for (std::size_t T = 1; T < t.frozen.size(); ++T) {
      // Never past the real-valued bound's ceiling, at least one layer a step until the cap.
      CHECK(t.frozen[T] <= std::max(t.frozen[T - 1] + 1, static_cast<int>(std::ceil(
                                                              ep::alpha_bound_real(L, t.frozen[T - 1], alpha)))));
      if (t.frozen[T - 1] < L - min_active) CHECK(t.frozen[T] > t.frozen[T - 1]);
    }
  }
}

TEST_CASE("shared cores stretch the planner's compute when more workers run than cores") {
  const ep::Config c = tiny_bert({"planner.objective=paper"});
  ep::Config shared = c;
  shared.cluster.shared_cores = 2;
  const ep::AnalyticCostModel cost(c.cluster, c.training);
  const ep::PlanContext ctx(c, cost), ctx_shared(shared, cost);
  const ep::RunPlan r = plan(c);
  const ep::IterationSetup s = ep::iteration_setup(c, r.plans.front(), false);
  REQUIRE(s.K == 4);
  const ep::Timeline alone = ep::predict_iteration(ctx, s), two_cores = ep::predict_iteration(ctx_shared, s);
  // 4 workers on 2 cores: compute takes twice as long; transfers do not.
  CHECK(two_cores.compute_time == Approx(2 * alone.compute_time));
  CHECK(two_cores.makespan > 1.5 * alone.makespan);
  shared.cluster.shared_cores = 4;
  const ep::PlanContext ctx_four(shared, cost);
  CHECK(ep::predict_iteration(ctx_four, s).makespan == Approx(alone.makespan));
}

TEST_CASE("mode lists: each mode once in kAllModes order, the baseline first, empty entries refused", "[modes]") {
  using namespace ep;
  CHECK(parse_modes("autocache,baseline") == std::vector<Mode>{Mode::Baseline, Mode::AutoCache});
  CHECK(parse_modes("all") == std::vector<Mode>(std::begin(kAllModes), std::end(kAllModes)));
  CHECK(parse_modes("all,freeze,all") == std::vector<Mode>(std::begin(kAllModes), std::end(kAllModes)));
  CHECK(parse_modes("freeze") == std::vector<Mode>{Mode::Freeze});
  for (const char* bad : {"", ",", "baseline,", ",freeze", "baseline,,freeze", "fast"})
    CHECK_THROWS_WITH(parse_modes(bad), Catch::Contains("--mode: expected"));
  for (const Mode m : kAllModes) CHECK(parse_mode(to_string(m)) == m);
  CHECK(kAllModes[0] == Mode::Baseline);
  CHECK(std::end(kAllModes)[-1] == Mode::Configured);  // the last mode is traced: the config as train runs it
  // The reference always runs.
  CHECK(with_reference({Mode::AutoCache}, Mode::Baseline) == std::vector<Mode>{Mode::Baseline, Mode::AutoCache});
  CHECK(with_reference({Mode::AutoCache}, Mode::GPipe) == std::vector<Mode>{Mode::GPipe, Mode::AutoCache});
  CHECK(with_reference({Mode::Baseline}, Mode::Baseline) == std::vector<Mode>{Mode::Baseline});
  CHECK(parse_reference("gpipe") == Mode::GPipe);
  CHECK_THROWS_WITH(parse_reference("autocache"), Catch::Contains("--reference: expected baseline"));
}

TEST_CASE("mode configs: the best static plan weighs every K by time, configured is the config", "[modes]") {
  using namespace ep;
  const Config c = paper_config("vit_imagenet", {"planner.objective=\"paper\"", "planner.compression=\"none\"",
                                                 "planner.autodp=false"});
  const Config base = mode_config(c, Mode::Baseline);
  CHECK(base.planner.freeze_policy == "none");
  CHECK(base.planner.objective == Objective::Time);
  CHECK(base.planner.autopipe);
  CHECK(base.planner.autodp);
  CHECK(base.planner.compression != CompressionKind::None);
  CHECK(base.planner.cache == CachePolicyKind::Off);
  const Config gpipe = mode_config(c, Mode::GPipe);
  CHECK(gpipe.planner.freeze_policy == "none");
  CHECK_FALSE(gpipe.planner.autopipe);
  CHECK_FALSE(gpipe.planner.autodp);
  CHECK(gpipe.planner.objective == Objective::Paper);  // as configured
  const Config configured = mode_config(c, Mode::Configured);
  CHECK(configured.planner.objective == c.planner.objective);
  CHECK(configured.planner.autodp == c.planner.autodp);
  CHECK(configured.planner.cache == c.planner.cache);
  CHECK(configured.planner.freeze_policy == c.planner.freeze_policy);
}
