// The simulator's memo key (Simulator::request_key) is derived from the
// run the child is sent, so it changes with every input SimGrid reads and
// with nothing else: each field of a request is changed in turn and every
// change gives a key of its own; plan_id, which only names trace events,
// gives the same key and the same result.
#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <string>
#include <utility>

#include "planner/cost_model.hpp"
#include "planner/iteration.hpp"
#include "planner/autopipe.hpp"
#include "sim/driver.hpp"
#include "tests/sim/support.hpp"

using namespace ep;
using sim::SimRequest;

namespace {

bool has(const SimRequest& q, ActionKind kind) {
  for (const auto& device : q.schedule.devices)
    for (const Action& a : device)
      if (a.kind == kind) return true;
  return false;
}

// `q` with one kind's durations (or bytes, or rate bound) scaled.
enum class Part { Duration, Bytes, Alone };
SimRequest scaled(SimRequest q, ActionKind kind, Part part) {
  const auto scale = [kind](auto f) {
    return [f, kind](const Action& a) { return a.kind == kind ? 1.5 * f(a) + 1e-3 : f(a); };
  };
  if (part == Part::Duration) q.costs.duration = scale(q.costs.duration);
  if (part == Part::Bytes) q.costs.bytes = scale(q.costs.bytes);
  if (part == Part::Alone) q.costs.alone = scale(q.costs.alone);
  return q;
}

}  // namespace

TEST_CASE("request key: every input SimGrid reads changes it, plan_id does not", "[sim][memo]") {
  // ViT-B/16, K = 2 on two replicas across both nodes, 4 frozen layers with
  // the cache on: a fill iteration (FZ, CW) and a steady one (CR), so every
  // action kind is there to change.
  const Config c = load_config(test::repo_path("configs/paper/vit_imagenet.toml"),
                               {"planner.K=2", "exec.device=\"cuda\""});
  const AnalyticCostModel cost(c.cluster, c.training);
  const PlanContext ctx(c, cost);
  sim::Simulator simulator(c.cluster);
  IterationSetup setup;
  setup.partition = plan_partition(ctx, 4, 2, true);
  setup.K = 2;
  setup.M = 4;
  setup.replicas = 2;
  setup.replicas_span_nodes = true;
  setup.cache_on = true;
  setup.batch = c.training.batch_size;
  IterationSetup fill = setup;
  fill.cache_valid_layers = 0;
  const SimRequest steady = sim::program_request(ctx, sim::read_sim_config(c), lower_iteration(ctx, setup));
  const SimRequest filling = sim::program_request(ctx, sim::read_sim_config(c), lower_iteration(ctx, fill));
  REQUIRE(steady.replica_gpus.size() == 2);
  REQUIRE(has(steady, ActionKind::CacheRead));
  REQUIRE(has(filling, ActionKind::CacheWrite));
  REQUIRE(has(filling, ActionKind::FrozenForward));

  std::map<std::string, SimRequest> changed;
  const auto change = [&](const std::string& what, const SimRequest& base, auto edit) {
    SimRequest q = base;
    edit(q);
    changed.emplace(what, std::move(q));
  };
  for (const ActionKind k : {ActionKind::Forward, ActionKind::Backward, ActionKind::OptimizerStep}) {
    REQUIRE(has(steady, k));
    changed.emplace("duration of kind " + std::to_string(static_cast<int>(k)), scaled(steady, k, Part::Duration));
  }
  changed.emplace("duration of FZ", scaled(filling, ActionKind::FrozenForward, Part::Duration));
  for (const ActionKind k : {ActionKind::SendAct, ActionKind::SendGrad, ActionKind::AllReduce, ActionKind::CacheRead}) {
    REQUIRE(has(steady, k));
    changed.emplace("bytes of kind " + std::to_string(static_cast<int>(k)), scaled(steady, k, Part::Bytes));
  }
  changed.emplace("bytes of CW", scaled(filling, ActionKind::CacheWrite, Part::Bytes));
  changed.emplace("rate bound of CR", scaled(steady, ActionKind::CacheRead, Part::Alone));
  changed.emplace("rate bound of CW", scaled(filling, ActionKind::CacheWrite, Part::Alone));
  change("iterations", steady, [](SimRequest& q) { q.iterations = 3; });
  change("cache tier", steady, [](SimRequest& q) { q.cache_tier = CacheTier::Disk; });
  change("writes behind", filling, [](SimRequest& q) { q.cache_writes_behind = !q.cache_writes_behind; });
  change("reads ahead", steady, [](SimRequest& q) { q.cache_reads_ahead = !q.cache_reads_ahead; });
  change("collective model", steady, [](SimRequest& q) { q.collectives = "analytic"; });
  change("ranks", steady, [](SimRequest& q) { std::swap(q.replica_rank.at(0), q.replica_rank.at(1)); });
  change("GPUs", steady, [](SimRequest& q) { std::swap(q.replica_gpus.at(0).at(0), q.replica_gpus.at(0).at(1)); });
  change("one replica", steady, [](SimRequest& q) {
    q.replica_gpus.pop_back();
    q.replica_rank.pop_back();
  });
  change("action order", steady, [](SimRequest& q) {
    auto& d = q.schedule.devices.at(0);
    std::swap(d.at(2), d.at(3));  // the first send and the second cache read
  });

  std::set<std::string> keys{simulator.request_key(steady), simulator.request_key(filling)};
  REQUIRE(keys.size() == 2);
  for (const auto& [what, q] : changed) {
    CAPTURE(what);
    CHECK(keys.insert(simulator.request_key(q)).second);
  }

  SimRequest named = steady;
  named.plan_id = 7;
  CHECK(simulator.request_key(named) == simulator.request_key(steady));
  CHECK(simulator.run(named).iteration_end_s == simulator.run(steady).iteration_end_s);
}

TEST_CASE("request key: an invalid request is refused as run() refuses it", "[sim][memo]") {
  const Config c = load_config(test::repo_path("configs/paper/vit_imagenet.toml"));
  sim::Simulator simulator(c.cluster);
  SimRequest q;  // no replica, no costs
  CHECK_THROWS_AS(simulator.request_key(q), Error);
}
