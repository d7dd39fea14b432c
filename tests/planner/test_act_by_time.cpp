// Acting on a freeze step is a decision by time, and the speedup's
// reference is the best plan without freezing: properties over random
// configs (models, 2 to 8,192 devices, epochs, bandwidths, transition
// terms), planned ahead with the analytic predictor.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>

#include "planner/modes.hpp"
#include "planner/run_figures.hpp"
#include "planner/run_loop.hpp"
#include "planner/transition.hpp"
#include "tests/planner/support.hpp"

using namespace ep;
using ep::test::paper_config;

namespace {

// The whole run as the planner predicts it: every plan's epochs and the
// transition into it (the first plan's: the run's start).
double predicted_total_s(const RunPlan& run) {
  double t = 0;
  for (const Plan& p : run.plans) t += p.predicted_epochs_s() + p.predicted_transition_s;
  return t;
}

struct Instance {
  std::string workload;
  Overrides overrides;
  std::string text() const {
    std::string out = workload;
    for (const auto& o : overrides) out += " " + o;
    return out;
  }
};

// A random what-if: a paper workload on 2 to 8,192 devices (the largest
// rarely: planning there takes seconds), a few epochs, the freeze policy's
// alpha, the links' bandwidths and the transition terms drawn at random.
Instance random_instance(std::mt19937& rng) {
  const auto pick = [&](auto... v) {
    const std::vector<std::common_type_t<decltype(v)...>> all{v...};
    return all[std::uniform_int_distribution<std::size_t>(0, all.size() - 1)(rng)];
  };
  const auto uniform = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  Instance in;
  in.workload = pick(std::string("vit_imagenet"), std::string("vit_cifar100"), std::string("bert_base_sst2"),
                     std::string("bert_large_squad"));
  const int gpus = pick(1, 2, 4, 8);
  const bool large = std::uniform_int_distribution<int>(0, 19)(rng) == 0;
  const int nodes = large ? pick(64, 256, 1024) : pick(1, 2, 4, 8, 16);
  const int K = std::min(gpus, pick(1, 2, 4, 8));
  in.overrides = {"cluster.gpus_per_node=" + std::to_string(gpus),
                  "cluster.nodes=" + std::to_string(std::max(nodes, gpus == 1 ? 2 : 1)),
                  "planner.K=" + std::to_string(K),
                  "planner.freeze_policy=\"alpha\"",
                  "planner.alpha=" + std::to_string(uniform(0.15, 0.6)),
                  "training.epochs=" + std::to_string(pick(2, 3, 5, 8)),
                  "data.num_train_samples=" + std::to_string(pick(20000, 100000, 1000000)),
                  "cluster.intra_node.bandwidth_bytes_per_s=" + std::to_string(uniform(2e9, 3e11)),
                  "cluster.inter_node.bandwidth_bytes_per_s=" + std::to_string(uniform(1e9, 5e10)),
                  "cluster.transition.context_creation_s=" + std::to_string(uniform(0, 5)),
                  "cluster.transition.group_setup_s=" + std::to_string(uniform(0, 3)),
                  "cluster.transition.group_per_rank_s=" + std::to_string(uniform(0, 0.1)),
                  "cluster.transition.warmup_iterations=" + std::to_string(uniform(0, 2)),
                  std::string("planner.cache=\"") + pick("auto", "off") + "\""};
  return in;
}

}  // namespace

// The planner's own bound: the full method weighs never acting (the best
// static plan throughout) among its choices, so it is never predicted
// slower; and a plan that does not fit is never chosen where one fits.
TEST_CASE("over random what-ifs the full method is never predicted slower than the best static plan",
          "[act_by_time]") {
  std::mt19937 rng(20261129);
  int acted = 0, declined = 0, feasible = 0;
  for (int i = 0; i < 100; ++i) {
    const Instance in = random_instance(rng);
    INFO(i << ": " << in.text());
    const Config c = paper_config(in.workload, in.overrides);
    const AnalyticCostModel cost(c.cluster, c.training);
    const Config base_c = mode_config(c, Mode::Baseline), method_c = mode_config(c, Mode::AutoCache);
    const AnalyticCostModel base_cost(base_c.cluster, base_c.training), method_cost(method_c.cluster, method_c.training);
    const RunPlan base = plan_run(base_c, base_cost), method = plan_run(method_c, method_cost);
    const ModelSpec spec = build_model_spec(c.model, c.training.precision);
    const RunFigures bf = run_figures(spec, base.plans), mf = run_figures(spec, method.plans);
    // Where no plan without freezing fits there is no best static plan (and
    // among plans that do not fit the planner takes the least memory).
    if (bf.fits_memory) {
      ++feasible;
      CHECK(mf.fits_memory);
      CHECK(predicted_total_s(method) <= predicted_total_s(base) * (1 + 1e-9));
    }
    // Like for like: the same global batch and updates (training.batch_policy = "global").
    CHECK(mf.updates == bf.updates);
    CHECK(mf.global_batch_max == bf.global_batch_max);
    for (const Plan& p : method.plans) {
      CHECK(p.frozen_layers <= p.frozen_allowed);
      acted += p.freeze_step > 0 && p.frozen_layers == p.frozen_allowed;
      declined += p.frozen_layers < p.frozen_allowed;
    }
  }
  // Both choices are met: steps acted on and steps deferred.
  CHECK(feasible >= 60);
  CHECK(acted > 0);
  CHECK(declined > 0);
}

// More bandwidth never makes the chosen run slower (predicted): every plan
// gets no slower, and the planner takes the least over the same choices.
TEST_CASE("more bandwidth never makes the planned run slower", "[act_by_time]") {
  std::mt19937 rng(7);
  for (int i = 0; i < 40; ++i) {
    Instance in = random_instance(rng);
    INFO(i << ": " << in.text());
    const Config c = mode_config(paper_config(in.workload, in.overrides), Mode::AutoCache);
    Overrides faster = in.overrides;
    for (auto& o : faster)
      if (o.find("bandwidth_bytes_per_s=") != std::string::npos)
        o = o.substr(0, o.find('=') + 1) + std::to_string(4 * std::stod(o.substr(o.find('=') + 1)));
    const Config f = mode_config(paper_config(in.workload, faster), Mode::AutoCache);
    const AnalyticCostModel cost(c.cluster, c.training), fast_cost(f.cluster, f.training);
    CHECK(predicted_total_s(plan_run(f, fast_cost)) <= predicted_total_s(plan_run(c, cost)) * (1 + 1e-3));
  }
}

// A step is acted on only where it pays: with a transition that costs more
// than the whole run could save, nothing moves; with free transitions,
// every step that frees work is taken.
TEST_CASE("a freeze step whose transition costs more than it saves is not acted on", "[act_by_time]") {
  const Overrides common = {"planner.freeze_policy=\"alpha\"", "training.epochs=6", "data.num_train_samples=20000"};
  Overrides costly = common, free = common;
  for (const char* o : {"cluster.transition.group_setup_s=50000", "cluster.transition.warmup_iterations=1000"})
    costly.push_back(o);
  for (const char* o : {"cluster.transition.context_creation_s=0", "cluster.transition.group_setup_s=0",
                        "cluster.transition.group_per_rank_s=0", "cluster.transition.warmup_iterations=0"})
    free.push_back(o);
  const Config slow = paper_config("vit_imagenet", costly), fast = paper_config("vit_imagenet", free);
  const AnalyticCostModel slow_cost(slow.cluster, slow.training), fast_cost(fast.cluster, fast.training);
  const RunPlan never = plan_run(slow, slow_cost), always = plan_run(fast, fast_cost);
  for (const Plan& p : never.plans) {
    INFO("T=" << p.freeze_step << " " << p.freeze_reason);
    CHECK(p.frozen_layers == 0);
    if (p.freeze_step > 0) CHECK(p.freeze_reason.rfind("not acted on", 0) == 0);
  }
  int taken = 0;
  for (const Plan& p : always.plans) taken += p.freeze_step > 0 && p.frozen_layers == p.frozen_allowed;
  CHECK(taken >= 3);
  CHECK(always.plans.back().frozen_layers > 0);
}

// The policy keeps its own count: a step not acted on does not hold back
// what the policy allows later (the alpha bound grows from its own last).
TEST_CASE("the freeze policy continues from what it allowed, acted on or not", "[act_by_time]") {
  const Config c = paper_config("vit_imagenet", {"planner.freeze_policy=\"alpha\"", "training.epochs=6",
                                                 "cluster.transition.group_setup_s=50000"});
  const AnalyticCostModel cost(c.cluster, c.training);
  const RunPlan run = plan_run(c, cost);
  const FreezeTimeline timeline = freeze_timeline(c, static_cast<int>(run.plans.size()) - 1);
  for (const Plan& p : run.plans) CHECK(p.frozen_allowed == timeline.frozen[static_cast<std::size_t>(p.freeze_step)]);
}

// Faster devices, or twice the nodes (the global batch grows with them:
// batch_size per pipeline of planner.K), never make the planned run slower.
// A larger group costs more to make (group_per_rank_s), which the planner
// cannot avoid by leaving devices idle: instances where that start alone
// outweighs a hundredth of the run are not a question of planning.
TEST_CASE("faster devices or more nodes never make the planned run slower", "[act_by_time]") {
  std::mt19937 rng(17);
  int compared = 0;
  for (int i = 0; i < 40; ++i) {
    const Instance in = random_instance(rng);
    INFO(i << ": " << in.text());
    const auto planned = [&](const Overrides& extra) {
      Overrides o = in.overrides;  // each key once: an extra one replaces the instance's
      for (const std::string& e : extra) {
        const std::string key = e.substr(0, e.find('=') + 1);
        o.erase(std::remove_if(o.begin(), o.end(), [&](const std::string& x) { return x.rfind(key, 0) == 0; }), o.end());
        o.push_back(e);
      }
      const Config c = mode_config(paper_config(in.workload, o), Mode::AutoCache);
      const AnalyticCostModel cost(c.cluster, c.training);
      const RunPlan run = plan_run(c, cost);
      return std::make_pair(predicted_total_s(run), run_figures(build_model_spec(c.model, c.training.precision), run.plans).fits_memory);
    };
    const Config c = paper_config(in.workload, in.overrides);
    const auto [base_s, fits] = planned({});
    if (!fits) continue;
    const auto [faster_s, faster_fits] = planned({"cluster.device.peak_flops_per_s=" + std::to_string(2 * c.cluster.device.peak_flops_per_s)});
    CHECK(faster_fits);
    CHECK(faster_s <= base_s * (1 + 1e-3));
    const int nodes = 2 * c.cluster.nodes;
    if (nodes * c.cluster.gpus_per_node > kMaxClusterDevices) continue;
    const double group = c.cluster.transition.group_s(nodes * c.cluster.gpus_per_node / c.planner.K);
    if (group > 0.01 * base_s) continue;
    const auto [more_s, more_fits] = planned({"cluster.nodes=" + std::to_string(nodes)});
    CHECK(more_s <= base_s * (1 + 1e-3));
    ++compared;
  }
  CHECK(compared >= 10);
}
