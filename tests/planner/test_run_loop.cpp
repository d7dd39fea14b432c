// The one run loop against fake back ends: every epoch runs once, in order,
// under the plan that covers it, after that plan was entered from the one
// before; the start runs once, before the first epoch; the plans are
// plan_run's; the cache is probed where AutoCache needs it and nowhere
// else; a follower holds the decider's plans; a resumed loop continues
// exactly where the uninterrupted one was.
#include <catch2/catch.hpp>

#include <deque>
#include <nlohmann/json.hpp>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "planner/program_text.hpp"
#include "planner/run_loop.hpp"
#include "tests/planner/support.hpp"

namespace {

using namespace ep;

// Records what the loop asks for, in order, as text ("enter 1<-0",
// "epoch 3 plan 1", ...), and answers with fixed measurements.
struct FakeBackend : RunBackend {
  std::vector<std::string> calls;
  std::vector<int> probed;
  std::vector<std::string> started_with;  // the start programs given, as text
  std::vector<double> norms;  // empty: plan ahead
  std::deque<std::pair<StepInputs, int>>* channel = nullptr;  // decider -> follower: inputs and plan id
  bool leader = true;

  bool decides() const override { return leader; }
  std::vector<double> grad_norms() override {
    calls.push_back("norms");
    return norms;
  }
  std::optional<MeasuredCache> probe_cache(int frozen) override {
    probed.push_back(frozen);
    calls.push_back("probe " + std::to_string(frozen));
    return MeasuredCache{1e-3 * frozen, 2e-3 * frozen};  // reading beats recomputing
  }
  void publish(int step, const StepInputs& in, const Plan& plan) override {
    if (channel) channel->push_back({in, plan.id});
    calls.push_back("publish " + std::to_string(step));
  }
  StepInputs follow(int step) override {
    REQUIRE(channel);
    REQUIRE(!channel->empty());
    auto [in, id] = channel->front();
    channel->pop_front();
    CHECK(id == step);
    calls.push_back("follow " + std::to_string(step));
    return in;
  }
  void begin_step(int step) override { calls.push_back("step " + std::to_string(step)); }
  void enter(const Plan& plan, const Plan* previous) override {
    calls.push_back("enter " + std::to_string(plan.id) + "<-" + (previous ? std::to_string(previous->id) : "none"));
  }
  void start(const Plan& plan, const IterationProgram& program, int epoch) override {
    CHECK(plan.first_epoch <= epoch);
    CHECK(epoch < plan.end_epoch);
    CHECK(program.setup.partition == plan.program.setup.partition);
    started_with.push_back(program_text(program));
    calls.push_back("start " + std::to_string(plan.id) + " at " + std::to_string(epoch));
  }
  void run_epoch(const Plan& plan, int epoch) override {
    CHECK(plan.first_epoch <= epoch);
    CHECK(epoch < plan.end_epoch);
    CHECK(plan.program_for(epoch).setup.cache_valid_layers == (plan.cache_role(epoch) == CacheRole::Fill ||
                                                                        plan.cache_role(epoch) == CacheRole::Advance
                                                                    ? plan.cache_fill_from
                                                                    : -1));
    calls.push_back("epoch " + std::to_string(epoch) + " plan " + std::to_string(plan.id));
  }
};

// What the loop must ask for a training whose plans are `plans`, from
// epoch `from` (a resume enters the plan covering it afresh).
std::vector<std::string> expected_epochs(const std::vector<Plan>& plans) {
  std::vector<std::string> out;
  for (const Plan& p : plans) {
    out.push_back("enter " + std::to_string(p.id) + "<-" + (p.id ? std::to_string(p.id - 1) : "none"));
    if (p.id == 0) out.push_back("start 0 at 0");  // once, before the first epoch
    for (int e = p.first_epoch; e < p.end_epoch; ++e)
      out.push_back("epoch " + std::to_string(e) + " plan " + std::to_string(p.id));
  }
  return out;
}

// The walk a record says the loop carried out, in the calls' words.
std::vector<std::string> record_walk(const RunRecord& record) {
  std::vector<std::string> out;
  for (const StepRecord& s : record.steps) {
    const std::string plan = std::to_string(s.plan);
    out.push_back("enter " + plan + "<-" + (s.previous < 0 ? "none" : std::to_string(s.previous)));
    if (s.start_epoch >= 0) out.push_back("start " + plan + " at " + std::to_string(s.start_epoch));
    for (const int e : s.epochs) out.push_back("epoch " + std::to_string(e) + " plan " + plan);
  }
  return out;
}

// The record's steps against the plans they entered, and its start program
// the one the back end was given.
void check_record(const RunRecord& record, const RunPlan& run, const FakeBackend& b) {
  std::vector<std::string> starts;
  for (const StepRecord& s : record.steps) {
    const Plan& p = run.plans.at(s.plan);
    CHECK(s.step == p.freeze_step);
    CHECK(s.inputs.frozen_layers == p.frozen_allowed);
    if (s.start_epoch >= 0) starts.push_back(program_text(s.start));
  }
  CHECK(starts == b.started_with);
  CHECK(starts.size() == 1);
}

std::vector<std::string> only_walk(const std::vector<std::string>& calls) {
  std::vector<std::string> out;
  for (const auto& c : calls)
    if (c.rfind("enter", 0) == 0 || c.rfind("start", 0) == 0 || c.rfind("epoch", 0) == 0) out.push_back(c);
  return out;
}

Config random_config(std::mt19937& rng) {
  const int epochs = 1 + static_cast<int>(rng() % 7);
  const int interval = 1 + static_cast<int>(rng() % 3);
  const char* caches[] = {"auto", "on", "off"};
  return test::tiny_bert({"training.epochs=" + std::to_string(epochs),
                          "planner.freeze_interval_epochs=" + std::to_string(interval),
                          "planner.alpha=" + std::to_string(0.1 + 0.3 * (rng() % 4) / 3.0),
                          std::string("planner.cache=") + caches[rng() % 3],
                          std::string("planner.autopipe=") + (rng() % 4 ? "true" : "false"),
                          std::string("planner.objective=") + (rng() % 2 ? "time" : "paper")});
}

}  // namespace

TEST_CASE("the run loop walks every epoch once, under its plan, after entering it, on random trainings") {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    const Config c = random_config(rng);
    INFO("trial " << trial);
    const AnalyticCostModel cost(c.cluster, c.training);
    RunPlanner planner(c, cost);
    FakeBackend b;
    const RunRecord record = run_training(planner, b);
    const std::vector<Plan>& plans = planner.run().plans;
    REQUIRE(static_cast<int>(plans.size()) == planner.freeze_steps() + 1);
    CHECK(only_walk(b.calls) == expected_epochs(plans));
    // The record is the walk: what the back end was asked, step by step,
    // each step planned from the inputs it holds (probed where the plan says).
    CHECK(record_walk(record) == only_walk(b.calls));
    check_record(record, planner.run(), b);
    for (const StepRecord& s : record.steps) CHECK(s.inputs.cache.has_value() == plans.at(s.plan).cache_probed);
    // Without measured norms the plans are plan_run's, apart from the
    // cache decisions the probes informed. The loop probes exactly where the
    // planner says a step does, at the depth the policy allows, and only
    // where AutoCache may.
    std::vector<int> want_probes;
    for (const Plan& p : plans)
      if (p.cache_probed) {
        CHECK(probes_cache(c, p.frozen_allowed));
        want_probes.push_back(p.frozen_allowed);
      }
    CHECK(b.probed == want_probes);
    if (want_probes.empty()) {
      const RunPlan ahead = plan_run(c, cost);
      const ModelSpec spec = build_model_spec(c.model, c.training.precision);
      CHECK(to_json(ahead, spec) == to_json(planner.run(), spec));
    }
    // Every plan's programs are lowered: the steady state always, the
    // fill program exactly when the first epoch fills or advances.
    for (const Plan& p : plans) {
      CHECK(p.program.setup == iteration_setup(c, p, false));
      CHECK(p.fill_program.empty() == (p.cache_fill_from < 0));
      CHECK(p.program.recomputed_microbatches == p.recomputed_microbatches);
    }
  }
}

TEST_CASE("a follower of the run loop plans what the decider planned, from its published inputs") {
  std::mt19937 rng(12);
  for (int trial = 0; trial < 15; ++trial) {
    const Config c = random_config(rng);
    const AnalyticCostModel cost(c.cluster, c.training);
    std::deque<std::pair<StepInputs, int>> channel;
    RunPlanner lead_planner(c, cost), follow_planner(c, cost);
    FakeBackend lead, follower;
    lead.channel = follower.channel = &channel;
    follower.leader = false;
    // Measured norms that freeze the early layers first.
    for (int l = 0; l < c.model.num_hidden_layers; ++l) lead.norms.push_back(0.1 * (l + 1));
    const RunRecord led = run_training(lead_planner, lead);
    const RunRecord followed = run_training(follow_planner, follower);
    const ModelSpec spec = build_model_spec(c.model, c.training.precision);
    CHECK(to_json(lead_planner.run(), spec) == to_json(follow_planner.run(), spec));
    // One record of the run on both: the same walk from the same inputs.
    CHECK(record_walk(led) == record_walk(followed));
    REQUIRE(led.steps.size() == followed.steps.size());
    for (std::size_t i = 0; i < led.steps.size(); ++i) {
      CHECK(led.steps[i].inputs.frozen_layers == followed.steps[i].inputs.frozen_layers);
      CHECK(led.steps[i].inputs.cache.has_value() == followed.steps[i].inputs.cache.has_value());
      CHECK(program_text(led.steps[i].start) == program_text(followed.steps[i].start));
    }
    CHECK(only_walk(lead.calls) == only_walk(follower.calls));
    CHECK(follower.probed.empty());
    CHECK(channel.empty());
  }
}

TEST_CASE("a resumed run loop continues the uninterrupted walk from the checkpoint's epoch") {
  std::mt19937 rng(13);
  for (int trial = 0; trial < 20; ++trial) {
    const Config c = random_config(rng);
    const AnalyticCostModel cost(c.cluster, c.training);
    RunPlanner whole(c, cost);
    FakeBackend all;
    const RunRecord record = run_training(whole, all);
    const std::vector<Plan>& plans = whole.run().plans;
    const int epoch = static_cast<int>(rng() % c.training.epochs);
    // The resumed planner replays the recorded steps up to the plan
    // covering `epoch`, from their inputs (the frozen counts and cache
    // measurements a checkpoint holds).
    std::vector<StepInputs> steps;
    for (const StepRecord& s : record.steps)
      if (plans.at(s.plan).first_epoch <= epoch) steps.push_back(s.inputs);
    RunPlanner resumed(c, cost);
    replay_steps(resumed, steps);
    FakeBackend rest;
    const RunRecord continued = run_training(resumed, rest, epoch);
    CHECK(record_walk(continued) == only_walk(rest.calls));
    check_record(continued, resumed.run(), rest);
    const ModelSpec spec = build_model_spec(c.model, c.training.precision);
    CHECK(to_json(resumed.run(), spec)["plans"] == to_json(whole.run(), spec)["plans"]);
    // The same epochs from `epoch` on, the covering plan entered afresh.
    std::vector<std::string> want;
    for (const Plan& p : plans) {
      if (p.end_epoch <= epoch) continue;
      want.push_back("enter " + std::to_string(p.id) + "<-" +
                     (p.first_epoch <= epoch ? std::string("none") : std::to_string(p.id - 1)));
      if (p.first_epoch <= epoch) want.push_back("start " + std::to_string(p.id) + " at " + std::to_string(epoch));
      for (int e = std::max(epoch, p.first_epoch); e < p.end_epoch; ++e)
        want.push_back("epoch " + std::to_string(e) + " plan " + std::to_string(p.id));
    }
    CHECK(only_walk(rest.calls) == want);
  }
}
