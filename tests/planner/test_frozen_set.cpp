// Freezing beyond the prefix (decision 0037): the per-layer policy, the
// frozen set's arithmetic, what the cost and memory models charge a layer
// frozen inside, and the planner choosing the set by predicted time.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "planner/freeze.hpp"
#include "planner/iteration.hpp"
#include "planner/memory.hpp"
#include "planner/run_loop.hpp"
#include "planner/run_plan.hpp"
#include "planner/schedule.hpp"
#include "tests/planner/support.hpp"

using namespace ep;
using namespace ep::test;

namespace {

std::vector<int> random_subset(int L, std::mt19937& rng) {
  std::vector<int> out;
  for (int l = 0; l < L; ++l)
    if (rng() % 3 == 0) out.push_back(l);
  return out;
}

// Independently of the policy: `before` and, by ascending norm then layer,
// the trainable layers up to `count`.
std::vector<int> least_norms(const std::vector<double>& g, const std::vector<int>& before, int count) {
  std::vector<std::pair<double, int>> trainable;
  for (int l = 0; l < static_cast<int>(g.size()); ++l)
    if (std::find(before.begin(), before.end(), l) == before.end()) trainable.emplace_back(g[l], l);
  std::sort(trainable.begin(), trainable.end());
  std::vector<int> out = before;
  for (std::size_t i = 0; static_cast<int>(out.size()) < count && i < trainable.size(); ++i)
    out.push_back(trainable[i].second);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("frozen sets: the run from layer 0 is the prefix, the rest freeze inside", "[frozen_set]") {
  CHECK(frozen_set_of({}) == FrozenSet{0, {}});
  CHECK(frozen_set_of({0, 1, 2}) == FrozenSet{3, {}});
  CHECK(frozen_set_of({0, 1, 4, 6}) == FrozenSet{2, {4, 6}});
  CHECK(frozen_set_of({3, 5}) == FrozenSet{0, {3, 5}});
  CHECK(describe(FrozenSet{2, {4, 6}}) == "2 frozen + layers 4 6 inside");
  CHECK(describe(FrozenSet{3, {}}) == "3 frozen");
  std::mt19937 rng(60);
  for (int trial = 0; trial < 200; ++trial) {
    const std::vector<int> layers = random_subset(1 + static_cast<int>(rng() % 24), rng);
    const FrozenSet f = frozen_set_of(layers);
    CHECK(f.layers() == layers);
    CHECK(f.count() == static_cast<int>(layers.size()));
    CHECK((f.inside.empty() || f.inside.front() > f.prefix));
  }
  // Partition::trains: the stem with the prefix only, the head never frozen.
  Partition p;
  p.frozen_layers = 1;
  p.frozen_end = ModelSpec::frozen_prefix(1).last;  // stem, att.0, mlp.0
  p.frozen_inside = {2};
  const std::vector<bool> trains{false, false, false, true, true, false, false, true, true, true};
  for (int i = 0; i < 10; ++i) CHECK(p.trains(i) == trains[i]);
}

TEST_CASE("per-layer policy: the alpha bound's count, filled by the trainable layers of least gradient norm",
          "[frozen_set]") {
  std::mt19937 rng(61);
  for (int trial = 0; trial < 300; ++trial) {
    const int L = 2 + static_cast<int>(rng() % 23);
    PlannerConfig p;
    p.alpha = static_cast<double>(1 + rng() % 9) / 10;
    p.min_active_layers = 1 + static_cast<int>(rng() % L);
    const auto policy = make_per_layer_policy(L, p);
    REQUIRE(policy->per_layer());
    std::vector<int> before = random_subset(L, rng);
    if (static_cast<int>(before.size()) > L - p.min_active_layers) before.resize(std::max(0, L - p.min_active_layers));
    std::vector<double> g(L);
    for (double& x : g) x = static_cast<double>(rng() % 5);  // ties on purpose
    const int count = policy->next(1, static_cast<int>(before.size()), g);
    CAPTURE(L, p.alpha, p.min_active_layers, before.size());
    CHECK(count == alpha_bound(L, static_cast<int>(before.size()), p.alpha, p.freeze_rounding, p.min_active_layers));
    CHECK(policy->which(1, before, count, g) == least_norms(g, before, count));
  }
  // A prefix policy's set is its first layers.
  const Config c = tiny_bert({"planner.freeze_policy=\"alpha\"", "planner.alpha=0.5"});
  FreezeDecider prefix(c);
  const FreezeAllowance a = prefix.next_set(1, {}, {});
  CHECK(a.layers == std::vector<int>{0, 1});
  CHECK_FALSE(a.open);
  // The per-layer policy on measured norms names its layers; planning ahead
  // without them, it leaves the choice open.
  FreezeDecider per_layer(tiny_bert({"planner.freeze_policy=\"gradient_norm_per_layer\"", "planner.alpha=0.5"}));
  const std::vector<double> g{0.9, 0.1, 0.5, 0.2};
  CHECK(per_layer.next_set(1, {}, g).layers == std::vector<int>{1, 3});
  CHECK(per_layer.next_set(2, {1, 3}, g).layers == std::vector<int>{1, 2, 3});  // min_active_layers = 1 caps it
  const FreezeAllowance open = per_layer.next_set(1, {}, {});
  CHECK(open.open);
  CHECK(open.count == 2);
  CHECK(open.layers.empty());
}

namespace {

// Answers layers that drop an earlier one: the planner refuses it.
class Forgetful final : public FreezePolicy {
 public:
  std::string name() const override { return "forgetful_per_layer"; }
  bool per_layer() const override { return true; }
  int next(int, int before, std::span<const double>) const override { return before + 1; }
  std::vector<int> which(int, const std::vector<int>& before, int count, std::span<const double>) const override {
    std::vector<int> out;
    for (int l = 0; l < count; ++l) out.push_back(before.empty() ? l : before.back() + 1 + l);
    return out;
  }
};

}  // namespace

TEST_CASE("a per-layer policy's layers are checked: the earlier ones kept, sorted, as many as its count",
          "[frozen_set]") {
  static const bool once = [] {
    register_freeze_policy("forgetful_per_layer", [](const Config&) { return std::make_unique<Forgetful>(); });
    return true;
  }();
  (void)once;
  FreezeDecider d(tiny_bert({"planner.freeze_policy=\"forgetful_per_layer\""}));
  const std::vector<double> g{1, 1, 1, 1};
  CHECK(d.next_set(1, {}, g).layers == std::vector<int>{0});
  CHECK_THROWS_WITH(d.next_set(2, {0}, g),
                    Catch::Contains("freeze policy \"forgetful_per_layer\" at step 2: layers [1 2], expected 2 distinct "
                                    "sorted layers in [0, 4) including the 1 frozen before"));
}

TEST_CASE("a layer frozen inside costs its forward and its input's gradient, no weight gradient, optimizer "
          "state or all-reduce",
          "[frozen_set]") {
  const Config c = paper_config("bert_base_sst2", {"training.checkpointing=\"never\""});  // no recompute in the backward
  const AnalyticCostModel cost(c.cluster, c.training);
  const PlanContext ctx(c, cost);
  const ModelSpec& spec = ctx.spec;
  std::mt19937 rng(62);
  for (int trial = 0; trial < 20; ++trial) {
    const int prefix = static_cast<int>(rng() % 3);
    IterationSetup s{plan_partition(ctx, prefix, 4, false), 4, 1, 8, 2, true, false, CacheTier::HostMemory, -1,
                     c.training.batch_size};
    IterationSetup inside = s;
    for (int l = prefix + 1; l < spec.num_layers(); ++l)
      if (rng() % 3 == 0) inside.partition.frozen_inside.push_back(l);
    if (inside.partition.frozen_inside.empty()) inside.partition.frozen_inside.push_back(spec.num_layers() - 1);
    CAPTURE(inside.partition);
    const Partition& p = inside.partition;
    const IterationCosts with = iteration_costs(ctx, inside), without = iteration_costs(ctx, s);
    const int b = micro_batch_sizes(s.batch, s.M).front();
    double saved_total = 0;
    for (int st = 0; st < p.K(); ++st) {
      // The backward by hand: B for trained sublayers, B_in (below B) for those frozen inside.
      double bwd = 0, saved = 0, inside_params = 0;
      for (int i = p.active(st).first; i < p.active(st).last; ++i) {
        const Sublayer& sub = spec.sublayers[i];
        const bool layer = sub.kind == SublayerKind::Attention || sub.kind == SublayerKind::Mlp;
        REQUIRE((layer ? cost.backward_input_s(sub, b) < cost.backward_s(sub, b)
                       : cost.backward_input_s(sub, b) == cost.backward_s(sub, b)));
        bwd += p.trains(i) ? cost.backward_s(sub, b) : cost.backward_input_s(sub, b);
        if (!p.trains(i)) saved += cost.backward_s(sub, b) - cost.backward_input_s(sub, b), inside_params += sub.params;
      }
      const Action back{ActionKind::Backward, st, 0};
      CHECK(with.duration(back) == Approx(bwd).epsilon(1e-12));
      CHECK(without.duration(back) - with.duration(back) == Approx(saved).margin(1e-12));
      CHECK(trained_params(spec, p, st) == Approx(spec.params(p.active(st)) - inside_params));
      saved_total += saved;
      // Memory: weights and activations kept, their gradients and optimizer state dropped.
      const StageLoad plain{p.active(st), p.hosted_frozen(st), b, s.M};
      StageLoad frozen = plain;
      frozen.frozen_inside_params = inside_params;
      CHECK(stage_load(spec, p, st, b, s.M).frozen_inside_params == Approx(inside_params));
      const MemoryBreakdown m0 = stage_memory(spec, c.training, plain), m1 = stage_memory(spec, c.training, frozen);
      CHECK(m1.weights_bytes == m0.weights_bytes);
      CHECK(m1.activations_bytes == m0.activations_bytes);
      CHECK(m0.gradients_bytes - m1.gradients_bytes == Approx(4 * inside_params));
    }
    CHECK(saved_total > 0);
    CHECK(predict_iteration(ctx, inside).makespan < predict_iteration(ctx, s).makespan);
  }
}

TEST_CASE("planning ahead, a per-layer policy's set is chosen by predicted time, never slower than the prefix, and "
          "carried by every plan",
          "[frozen_set]") {
  for (const char* name : {"vit_imagenet", "bert_base_sst2"})
    for (const bool autopipe : {false, true}) {
      const std::string autopipe_key = autopipe ? "planner.autopipe=true" : "planner.autopipe=false";
      const Overrides mode{autopipe_key, "planner.cache=\"off\""};
      const Overrides per_layer{autopipe_key, "planner.cache=\"off\"", "planner.freeze_policy=\"gradient_norm_per_layer\""};
      const Config prefix_c = paper_config(name, mode), per_layer_c = paper_config(name, per_layer);
      const AnalyticCostModel cost(prefix_c.cluster, prefix_c.training);
      const RunPlan prefix = plan_run(prefix_c, cost), chosen = plan_run(per_layer_c, cost);
      CAPTURE(name, autopipe);
      // The same count as the prefix policy's alpha bound, at every step.
      REQUIRE(prefix.plans.size() == chosen.plans.size());
      for (std::size_t i = 0; i < chosen.plans.size(); ++i) {
        const Plan& p = chosen.plans[i];
        CHECK(p.allowed_set().count() == prefix.plans[i].frozen_allowed);
        const std::vector<int> trained = p.frozen_set().layers(), allowed = p.allowed_set().layers();
        CHECK(std::includes(allowed.begin(), allowed.end(), trained.begin(), trained.end()));  // never beyond the policy
        if (i > 0) {
          const std::vector<int> now = p.allowed_set().layers(), earlier = chosen.plans[i - 1].allowed_set().layers();
          CHECK(std::includes(now.begin(), now.end(), earlier.begin(), earlier.end()));
        }
        if (p.frozen_set() != prefix.plans[i].frozen_set() && !p.frozen_set_reason.empty())
          CHECK_THAT(p.frozen_set_reason, Catch::Contains("to the end, against"));
      }
      CHECK(chosen.predicted_total_s() <= prefix.predicted_total_s() * (1 + 1e-9));
      if (!autopipe) {  // nothing moves: freezing on the slowest stages shortens the pipeline, the prefix does not
        CHECK(chosen.predicted_total_s() < prefix.predicted_total_s());
        CHECK(std::any_of(chosen.plans.begin(), chosen.plans.end(),
                          [](const Plan& p) { return !p.partition.frozen_inside.empty(); }));
        CHECK(std::any_of(chosen.plans.begin(), chosen.plans.end(), [](const Plan& p) {
          return p.frozen_set_reason.find("(on the slowest stages)") != std::string::npos;
        }));
      }
    }
}
