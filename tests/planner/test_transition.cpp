// A transition's predicted parts (planner/transition.*): AutoCache's probe
// at a new frozen depth and its set-up, the node's cache file, the run's
// start; measured by a profile where one is given, else the config's.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "planner/cache_policy.hpp"
#include "planner/fitted_cost_model.hpp"
#include "planner/run_plan.hpp"
#include "planner/transition.hpp"
#include "tests/planner/support.hpp"

using ep::test::paper_config;

// Objective "paper" probes at every new depth; "time" only where a plan
// with the cache may pay for the probe. Either way the step's transition
// holds the probe it ran, at the depth the policy allowed, acted on or not.
TEST_CASE("a transition charges AutoCache's probe where the step ran it, and only where AutoCache probes") {
  for (const char* objective : {"paper", "time"})
    for (const char* policy : {"auto", "on", "off"}) {
    INFO(objective << " " << policy);
    const ep::Config c = paper_config("vit_imagenet", {std::string("planner.cache=") + policy,
                                                       std::string("planner.objective=") + objective});
    const ep::AnalyticCostModel cost(c.cluster, c.training);
    const ep::PlanContext ctx(c, cost);
    const ep::RunPlan run = ep::plan_run(c, cost);
    REQUIRE(run.plans.size() > 2);
    int probes = 0;
    for (std::size_t i = 1; i < run.plans.size(); ++i) {
      const ep::Plan &prev = run.plans[i - 1], &p = run.plans[i];
      const ep::TransitionCost t = ep::predict_transition(ctx, &prev, p);
      if (std::string(policy) != "auto") CHECK_FALSE(p.cache_probed);
      if (std::string(objective) == "paper")
        CHECK(p.cache_probed == (std::string(policy) == "auto" && p.frozen_allowed != prev.frozen_allowed));
      if (!p.cache_probed) {
        CHECK(t.cache_probe_s == 0);
        continue;
      }
      ++probes;
      // A batch written once; the frozen forward and the read of a batch,
      // each once untimed and three times on the clock.
      const int f = p.frozen_allowed;
      const ep::CacheDecision d = ep::decide_cache(c, ctx.spec, cost, f, c.training.batch_size);
      const double bytes = ctx.spec.sublayers[ep::ModelSpec::frozen_prefix(f).last - 1].out_activation_bytes_per_sample * c.training.batch_size;
      CHECK(t.cache_probe_s == Approx(4 * (d.read_s + d.frozen_forward_s) + cost.cache_write_s(bytes, d.tier)));
      CHECK(t.cache_probe_s > 0);
      CHECK(t.total_s() == Approx(t.state_s + t.contexts_s + t.rebuild_s + t.warmup_s + t.cache_probe_s +
                                  t.cache_create_s));
    }
    if (std::string(policy) == "auto" && std::string(objective) == "paper") CHECK(probes > 1);
  }
}

namespace {

// ViT-B/16's compute timed as the analytic model times it: a profile whose
// transition samples a test then measures.
ep::Profile analytic_vit_profile() {
  ep::Profile profile;
  const ep::Config base = paper_config("vit_imagenet");
  const ep::AnalyticCostModel truth(base.cluster, base.training);
  const ep::ModelSpec spec = ep::build_model_spec(base.model, base.training.precision);
  for (const int i : {0, 1, 2, spec.num_sublayers() - 1})  // stem, attention, MLP, head
    for (const int b : {1, 16, 128}) {
      const ep::Sublayer& sub = spec.sublayers[i];
      profile.compute.push_back({ep::to_string(sub.kind), "forward", b, truth.forward_s(sub, b)});
      profile.compute.push_back({ep::to_string(sub.kind), "backward", b, truth.backward_s(sub, b)});
      profile.compute.push_back({ep::to_string(sub.kind), "frozen_forward", b, truth.frozen_forward_s(sub, b)});
    }
  return profile;
}

}  // namespace

TEST_CASE("AutoCache's first probe also pays its set-up at the profile's measured rate, later probes do not") {
  ep::Profile profile = analytic_vit_profile();
  profile.transitions = {{ep::kCacheProbeSetupWhat, 1, 1e7, 0.05}, {ep::kCacheProbeSetupWhat, 1, 1e9, 0.5}};
  const ep::Config c = paper_config("vit_imagenet", {"planner.cache=\"auto\"", "planner.objective=\"paper\""});
  const ep::AnalyticCostModel analytic(c.cluster, c.training);
  const ep::FittedCostModel fitted(profile, analytic);
  const ep::PlanContext ctx(c, fitted), analytic_ctx(c, analytic);
  const ep::RunPlan run = ep::plan_run(c, fitted);
  const int batch = c.training.batch_size;
  int probes = 0, firsts = 0;
  for (std::size_t i = 1; i < run.plans.size(); ++i) {
    const ep::Plan &prev = run.plans[i - 1], &p = run.plans[i];
    if (p.frozen_layers == prev.frozen_layers) continue;
    ++probes;
    INFO("plan " << i << ": frozen " << prev.frozen_layers << " -> " << p.frozen_layers);
    const double without = ep::predict_cache_probe_s(c, ctx.spec, fitted, p.frozen_layers, batch, false);
    const double bytes =
        ctx.spec.sublayers[ep::ModelSpec::frozen_prefix(p.frozen_layers).last - 1].out_activation_bytes_per_sample * batch;
    const bool first = prev.frozen_layers == 0;
    CHECK(p.cache_probe_set_up == first);
    firsts += first;
    // The nearest measured batch's set-up, scaled to this batch's rows.
    CHECK(ep::predict_transition(ctx, &prev, p).cache_probe_s == Approx(without + (first ? 0.05 * bytes / 1e7 : 0.0)));
    CHECK(std::abs(bytes - 1e7) < std::abs(bytes - 1e9));  // the nearest sample is the 1e7 one
    // Not measured: no set-up charged.
    CHECK(ep::predict_transition(analytic_ctx, &prev, p).cache_probe_s ==
          Approx(ep::predict_cache_probe_s(c, ctx.spec, analytic, p.frozen_layers, batch, false)));
  }
  CHECK(probes > 1);
  CHECK(firsts == 1);
}

// A profile's whole probes at two depths scale the probe's terms at every
// depth by their measured over their modelled time: over random ratios and
// depths, a probe modelled r times short is predicted r times longer, at
// depths and batches the profile did not time too; the set-up is not scaled.
TEST_CASE("whole probes a profile timed scale the probe's terms at every depth") {
  const ep::Config c = paper_config("vit_imagenet", {"planner.cache=\"auto\""});
  const ep::AnalyticCostModel analytic(c.cluster, c.training);
  ep::Profile profile = analytic_vit_profile();
  profile.transitions = {{ep::kCacheProbeSetupWhat, 1, 1e7, 0.05}};
  const ep::FittedCostModel plain(profile, analytic);
  const ep::ModelSpec spec = ep::build_model_spec(c.model, c.training.precision);
  const int batch = c.training.batch_size, L = spec.num_layers();
  std::mt19937 rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    const double r = std::uniform_real_distribution<double>(0.7, 2.0)(rng);
    const int d1 = std::uniform_int_distribution<int>(1, L)(rng), d2 = std::uniform_int_distribution<int>(1, L)(rng);
    const int b1 = std::uniform_int_distribution<int>(1, 2 * batch)(rng);
    ep::Profile timed = profile;
    const auto terms = [&](int d, int b) { return ep::predict_cache_probe_s(c, spec, plain, d, b, false); };
    timed.cache_probes = {{d1, b1, r * terms(d1, b1)}, {d2, batch, r * terms(d2, batch)}};
    const ep::FittedCostModel fitted(timed, analytic);
    for (const int d : {1, L / 2, L}) {
      INFO("r " << r << ", timed at " << d1 << " and " << d2 << ", predicted at " << d);
      CHECK(ep::predict_cache_probe_s(c, spec, fitted, d, batch, false) == Approx(r * terms(d, batch)));
      const double setup = ep::predict_cache_probe_s(c, spec, plain, d, batch, true) - terms(d, batch);
      CHECK(setup > 0);
      CHECK(ep::predict_cache_probe_s(c, spec, fitted, d, batch, true) == Approx(setup + r * terms(d, batch)));
    }
  }
  // None timed: the terms alone (the test above).
  CHECK(plain.cache_probes().empty());
  CHECK(analytic.cache_probes().empty());
}

// What a process pays once before its iterations (device context, first
// iteration's extra), at the run's start and in a transition that wakes
// processes alike; and a freeze step's warm-up: a profile's where it
// measured them, else the config's assumptions.
TEST_CASE("a run's start and a woken process cost the profile's measured one-off work, else the config's") {
  ep::Profile profile = analytic_vit_profile();
  // The paper's batch policy: AutoDP's replicas are woken as K shrinks.
  const ep::Config c = paper_config("vit_imagenet", {"cluster.transition.context_creation_s=0.7",
                                                      "cluster.transition.warmup_iterations=0.25",
                                                      "training.batch_policy=\"per_pipeline\""});
  const ep::AnalyticCostModel analytic(c.cluster, c.training);
  {  // No first iteration measured: the config's figures.
    const ep::FittedCostModel fitted(profile, analytic);
    const ep::RunPlan run = ep::plan_run(c, fitted);
    const ep::TransitionCost t = ep::predict_transition(ep::PlanContext(c, fitted), nullptr, run.plans.front());
    CHECK(t.contexts_s == 0.7);
    CHECK(t.warmup_s == Approx(0.25 * run.plans.front().iteration_s));  // in the plan's iterations
  }
  // Two measurements: their mean, in place of both; later transitions unchanged.
  profile.transitions = {{ep::kFirstIterationWhat, 1, 0, 0.8}, {ep::kFirstIterationWhat, 1, 0, 0.9},
                         {ep::kCacheProbeSetupWhat, 1, 1e7, 0.05}};
  const ep::FittedCostModel fitted(profile, analytic);
  REQUIRE(fitted.first_iteration_s().has_value());
  CHECK(*fitted.first_iteration_s() == Approx(0.85));
  const ep::RunPlan run = ep::plan_run(c, fitted);
  const ep::PlanContext ctx(c, fitted);
  const ep::TransitionCost start = ep::predict_transition(ctx, nullptr, run.plans.front());
  CHECK(start.contexts_s == Approx(0.85));
  CHECK(start.warmup_s == 0);
  CHECK(start.total_s() == Approx(0.85 + start.rebuild_s));
  CHECK(run.plans.front().predicted_transition_s == Approx(start.total_s()));
  REQUIRE(run.plans.size() > 1);
  int wakes = 0;
  for (std::size_t i = 1; i < run.plans.size(); ++i) {
    const ep::TransitionCost t = ep::predict_transition(ctx, &run.plans[i - 1], run.plans[i]);
    CHECK(t.contexts_s == Approx(run.plans[i].woken_ranks.empty() ? 0.0 : 0.85));  // a woken process: as the run's start
    if (run.plans[i].frozen_layers != run.plans[i - 1].frozen_layers)
      CHECK(t.warmup_s == Approx(0.25 * run.plans[i].iteration_s));
    wakes += !run.plans[i].woken_ranks.empty();
  }
  CHECK(wakes > 0);
  // And its device context, where measured too: both pay it.
  profile.transitions.push_back({ep::kDeviceContextWhat, 1, 0, 0.25});
  const ep::FittedCostModel with_context(profile, analytic);
  REQUIRE(with_context.device_context_s().has_value());
  const ep::PlanContext ctx2(c, with_context);
  CHECK(ep::predict_transition(ctx2, nullptr, run.plans.front()).contexts_s == Approx(1.1));
  for (std::size_t i = 1; i < run.plans.size(); ++i)
    CHECK(ep::predict_transition(ctx2, &run.plans[i - 1], run.plans[i]).contexts_s ==
          Approx(run.plans[i].woken_ranks.empty() ? 0.0 : 1.1));
  // A freeze step's warm-up, where measured: every step that freezes or
  // repartitions pays it in the config's stead.
  profile.transitions.push_back({ep::kFreezeWarmupWhat, 1, 0, 0.02});
  const ep::FittedCostModel with_warmup(profile, analytic);
  const ep::PlanContext ctx3(c, with_warmup);
  for (std::size_t i = 1; i < run.plans.size(); ++i) {
    const ep::Plan &prev = run.plans[i - 1], &p = run.plans[i];
    const bool moves = ep::repartitioned(prev, p) || p.frozen_layers != prev.frozen_layers;
    CHECK(ep::predict_transition(ctx3, &prev, p).warmup_s == (moves ? 0.02 : 0.0));
  }
  // Without a first iteration measured, a context alone changes nothing.
  profile.transitions = {{ep::kDeviceContextWhat, 1, 0, 0.25}};
  const ep::FittedCostModel context_only(profile, analytic);
  CHECK(ep::predict_transition(ep::PlanContext(c, context_only), nullptr, run.plans.front()).contexts_s == 0.7);
}

// The start's iterations run the plan's timing program: no optimizer step,
// no all-reduce. Over the paper's configs and both cluster shapes, each is
// priced as that program's own schedule, never as the plan's iteration;
// where one device runs it alone, exactly the iteration less its step.
TEST_CASE("a run's start charges its iterations at the start program's own time, not the plan's iteration") {
  for (const char* name : {"vit_imagenet", "vit_cifar100", "bert_base_sst2"})
    for (const char* cluster : {"", "cluster.nodes=1"}) {
      INFO(name << " " << cluster);
      ep::Overrides o = {"cluster.transition.context_creation_s=0.7", "cluster.transition.warmup_iterations=0.06"};
      if (*cluster) o.push_back(cluster);
      const ep::Config c = paper_config(name, o);
      const ep::AnalyticCostModel cost(c.cluster, c.training);
      const ep::PlanContext ctx(c, cost);
      const ep::RunPlan run = ep::plan_run(c, cost);
      const ep::Plan& first = run.plans.front();
      const ep::IterationProgram start = ep::start_program(ctx, first, first.first_epoch);
      for (const auto& list : start.schedule.devices)
        for (const ep::Action& a : list) {
          CHECK(a.kind != ep::ActionKind::OptimizerStep);
          CHECK(a.kind != ep::ActionKind::AllReduce);
        }
      const double entry = ep::predict_transition(ctx, nullptr, first).total_s();
      const double own = ep::simulate(start.schedule, ep::iteration_costs(ctx, start.setup).duration).makespan;
      const ep::TransitionCost t = ep::predict_start(ctx, first, start, ep::analytic_predictor(ctx));
      CHECK(t.total_s() == Approx(entry + ep::kStartIterations * own));
      CHECK(own < first.iteration_s);
    }
  // One device, one micro-batch: the iteration is forward, backward, step.
  const ep::Config c = paper_config("vit_imagenet", {"planner.K=1", "planner.chunk_search=false", "planner.M=1", "cluster.nodes=1",
                                                      "cluster.gpus_per_node=1", "planner.freeze_policy=\"none\""});
  const ep::AnalyticCostModel cost(c.cluster, c.training);
  const ep::PlanContext ctx(c, cost);
  const ep::RunPlan run = ep::plan_run(c, cost);
  const ep::Plan& first = run.plans.front();
  REQUIRE(first.K == 1);
  REQUIRE(first.layout.replicas == 1);
  const ep::IterationCosts costs = ep::iteration_costs(ctx, first.program.setup);
  double step = 0;
  for (const ep::Action& a : first.program.schedule.devices.front())
    if (a.kind == ep::ActionKind::OptimizerStep) step += costs.duration(a);
  REQUIRE(step > 0);
  const ep::TransitionCost t =
      ep::predict_start(ctx, first, ep::start_program(ctx, first, first.first_epoch), ep::analytic_predictor(ctx));
  CHECK(t.total_s() - ep::predict_transition(ctx, nullptr, first).total_s() ==
        Approx(ep::kStartIterations * (first.iteration_s - step)));
}

TEST_CASE("the transition that first turns the cache on creates the node's file at the profile's measured rate") {
  // Compute timed as the analytic model times it, the cache file's creation
  // measured: fast (made ahead within the epochs before), and slow enough
  // that part of it is left to the step.
  for (const double scale : {1.0, 1e5}) {
    ep::Profile profile = analytic_vit_profile();
    profile.transitions = {{ep::cache_create_what("host"), 1, 1e8, 0.02 * scale},
                           {ep::cache_create_what("host"), 1, 1e9, 0.25 * scale},
                           {ep::cache_create_what("disk"), 1, 1e9, 0.01 * scale}};
    for (const char* policy : {"on", "auto", "off"}) {
      for (const char* host_memory : {"1e15", "1e9"}) {  // the host tier, or the disk
        INFO(policy << " host memory " << host_memory << " scale " << scale);
        // The paper's decisions: every step acted on, whatever the file costs.
        const ep::Config c = paper_config("vit_imagenet", {std::string("planner.cache=") + policy,
                                                            std::string("cluster.host.memory_bytes=") + host_memory,
                                                            "planner.objective=\"paper\""});
        const ep::AnalyticCostModel analytic(c.cluster, c.training);
        const ep::FittedCostModel fitted(profile, analytic);
        const ep::RunPlan run = ep::plan_run(c, fitted);
        const ep::PlanContext measured_ctx(c, fitted), analytic_ctx(c, analytic);
        int created = 0;
        for (std::size_t i = 1; i < run.plans.size(); ++i) {
          const ep::Plan &prev = run.plans[i - 1], &p = run.plans[i];
          const double measured = ep::predict_transition(measured_ctx, &prev, p).cache_create_s;
          // Not measured: the analytic model's page zeroing in memory, nothing on disk.
          const double zeroing = ep::predict_transition(analytic_ctx, &prev, p).cache_create_s;
          if (!p.cache.on || prev.cache.on || p.cache.tier == ep::CacheTier::Disk) CHECK(zeroing == 0);
          if (!p.cache.on || prev.cache.on) {
            CHECK(measured == 0);
            continue;
          }
          ++created;
          // Scaled from the nearest measured size of the plan's tier, less
          // what the epochs before covered where the file was made meanwhile.
          const bool host = p.cache.tier == ep::CacheTier::HostMemory;
          CHECK(host == (std::string(host_memory) == "1e15"));
          const double whole = (host ? 0.25 : 0.01) * scale * p.cache.bytes_per_node / 1e9;
          REQUIRE(prev.cache_file_ahead.has_value());  // a later step turns it on: made ahead
          CHECK(*prev.cache_file_ahead == p.cache.tier);
          const double trained = static_cast<double>(prev.epochs() * prev.iterations_per_epoch) * prev.iteration_s;
          CHECK(measured == Approx(std::max(0.0, whole - trained)));
          if (scale > 1) CHECK(measured > 0);
        }
        if (std::string(policy) == "on") CHECK(created == 1);  // on from the first freeze step to the end
        if (std::string(policy) == "off") CHECK(created == 0);
      }
    }
  }
}

TEST_CASE("the cache file is made ahead exactly while a plan without it trains and a later step may turn it on") {
  // Over many small random runs: policies, freeze intervals, host memory,
  // the deepest freezable depth.
  std::mt19937 rng(7);
  int ahead = 0, taken = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const char* policies[] = {"on", "auto", "off"};
    const char* freeze[] = {"alpha", "none"};
    const std::string policy = policies[rng() % 3], freeze_policy = freeze[rng() % 5 == 0 ? 1 : 0];
    const int epochs = 2 + static_cast<int>(rng() % 6), interval = 1 + static_cast<int>(rng() % 2);
    const int min_active = 1 + static_cast<int>(rng() % 4);
    INFO("trial " << trial << ": cache " << policy << ", freeze " << freeze_policy << ", epochs " << epochs
                  << ", interval " << interval << ", min_active " << min_active);
    const ep::Config c = paper_config(
        "vit_imagenet", {"planner.cache=\"" + policy + "\"", "planner.freeze_policy=\"" + freeze_policy + "\"",
                         "training.epochs=" + std::to_string(epochs),
                         "planner.freeze_interval_epochs=" + std::to_string(interval),
                         "planner.min_active_layers=" + std::to_string(min_active),
                         std::string("cluster.host.memory_bytes=") + (rng() % 2 ? "1e15" : "1e9")});
    const ep::AnalyticCostModel cost(c.cluster, c.training);
    const ep::RunPlan run = ep::plan_run(c, cost);
    for (std::size_t i = 0; i < run.plans.size(); ++i) {
      const ep::Plan& p = run.plans[i];
      const bool later_on = std::any_of(run.plans.begin() + static_cast<std::ptrdiff_t>(i) + 1, run.plans.end(),
                                        [](const ep::Plan& q) { return q.cache.on; });
      if (p.cache.on || i + 1 == run.plans.size() || policy == "off" || freeze_policy == "none") {
        CHECK_FALSE(p.cache_file_ahead.has_value());
        continue;
      }
      // Where a later plan turns it on, this one made it, in that plan's tier.
      ahead += p.cache_file_ahead ? 1 : 0;
      if (later_on) {
        ++taken;
        REQUIRE(p.cache_file_ahead.has_value());
        const auto on = std::find_if(run.plans.begin() + static_cast<std::ptrdiff_t>(i) + 1, run.plans.end(),
                                     [](const ep::Plan& q) { return q.cache.on; });
        CHECK(*p.cache_file_ahead == on->cache.tier);
      }
      if (policy == "on") CHECK(p.cache_file_ahead.has_value());
    }
  }
  CHECK(taken > 10);  // the instances cover both: files taken by a later plan,
  CHECK(ahead > taken);  // and files made for an auto policy that a measured probe may still turn on
}

TEST_CASE("an optimizer step charges the gradients' norms where the freeze policy reads them, as a profile timed them") {
  ep::Profile profile = analytic_vit_profile();
  profile.grad_norms = {{1e6, 1e-4 + 2e-4}, {1e7, 1e-4 + 2e-3}, {1e8, 1e-4 + 2e-2}};
  for (const char* policy : {"alpha", "gradient_norm"}) {
    INFO(policy);
    const ep::Config c = paper_config("vit_imagenet", {std::string("planner.freeze_policy=\"") + policy + "\""});
    const ep::AnalyticCostModel analytic(c.cluster, c.training);
    const ep::FittedCostModel fitted(profile, analytic);
    const ep::PlanContext ctx(c, fitted);
    const ep::RunPlan run = ep::plan_run(c, fitted);
    const bool reads = std::string(policy) == "gradient_norm";
    for (const ep::Plan& p : run.plans) {
      CHECK(p.program.setup.grad_norms == reads);  // what the executor computes
      ep::IterationSetup with = p.program.setup, without = with;
      with.grad_norms = true;
      without.grad_norms = false;
      const auto a = ep::iteration_costs(ctx, with), b = ep::iteration_costs(ctx, without);
      int steps = 0;
      for (const auto& device : p.program.schedule.devices)
        for (const ep::Action& x : device) {
          if (x.kind != ep::ActionKind::OptimizerStep) {
            CHECK(a.duration(x) == b.duration(x));
            continue;
          }
          ++steps;
          const double params = ctx.spec.params(p.partition.active(x.stage));
          CHECK(a.duration(x) - b.duration(x) == Approx(1e-4 + 2e-10 * params));
        }
      CHECK(steps > 0);
    }
  }
}
