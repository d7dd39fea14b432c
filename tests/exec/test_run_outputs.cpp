// The executor's outputs through the trace formats' strict readers, and the
// one helper that turns an action into a trace event.
#include "tests/exec/pch.hpp"

#include <unistd.h>

#include <filesystem>

#include "tests/exec/support.hpp"
#include "exec/trainer.hpp"
#include "planner/run_plan.hpp"
#include "traces/action_event.hpp"
#include "traces/run_outputs.hpp"

namespace {

using namespace ep;

using exec::testing::kTiny;

}  // namespace

TEST_CASE("action_event: the action's text and place, the context's run coordinates", "[traces]") {
  const Action send{ActionKind::SendAct, 1, 3, -1, 2};
  const trace::Event e = trace::action_event(5, send, 1.25, 1.5, {.replica = 2, .plan_id = 1, .iteration = 7, .bytes = 4096});
  CHECK(e.track == 5);
  CHECK(e.name == to_string(send));
  CHECK(e.category == "send");
  CHECK(e.start_s == 1.25);
  CHECK(e.end_s == 1.5);
  CHECK(e.stage == 1);
  CHECK(e.microbatch == 3);
  CHECK(e.bucket == -1);
  CHECK(e.replica == 2);
  CHECK(e.plan_id == 1);
  CHECK(e.iteration == 7);
  CHECK(e.epoch == -1);
  CHECK(e.bytes == 4096);
  CHECK(e.flow_in == 0);
  CHECK(e.flow_out == 0);
  const trace::Event ar = trace::action_event(0, {ActionKind::AllReduce, 0, -1, 2, -1}, 2.0, 1.999, {.epoch = 3});
  CHECK(ar.category == "allreduce");
  CHECK(ar.bucket == 2);
  CHECK(ar.epoch == 3);
  CHECK(ar.end_s == ar.start_s);  // a clock read a tick early on another thread
}

TEST_CASE("a training's iterations.csv, transitions.json and plan.json read back with the strict readers") {
  const auto dir = std::filesystem::temp_directory_path() / ("ep_outputs_" + std::to_string(::getpid()));
  const Config c = parse_config(kTiny, "tiny.toml");
  exec::TrainOptions o;
  o.out_dir = dir.string();
  const exec::TrainResult r = exec::train(c, o);
  const std::vector<double> losses = trace::read_iterations_csv((dir / "iterations.csv").string());
  REQUIRE(losses.size() == r.iteration_losses.size());
  for (std::size_t i = 0; i < losses.size(); ++i) CHECK(losses[i] == Approx(r.iteration_losses[i]).epsilon(1e-8));
  REQUIRE(!r.transitions.empty());
  CHECK((trace::read_transitions_json((dir / "transitions.json").string()) == r.transitions));
  const trace::PlanFile plans = trace::read_plan_json((dir / "plan.json").string());
  CHECK(plans.config == "tiny.toml");
  CHECK(plans.L == 4);
  for (const trace::EpochMetrics& e : r.epochs) {
    const auto p = std::find_if(plans.plans.begin(), plans.plans.end(),
                                [&](const trace::PlanRecord& p) { return p.id == e.plan_id; });
    REQUIRE(p != plans.plans.end());
    CHECK(p->first_epoch <= e.epoch);
    CHECK(e.epoch < p->end_epoch);
    CHECK(p->frozen_layers == e.frozen_layers);
    CHECK(p->K == e.K);
    CHECK(p->M == e.M);
    CHECK(p->replicas == e.replicas);
    CHECK(p->cache == e.cache);
  }
  std::filesystem::remove_all(dir);
}
