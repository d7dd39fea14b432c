// elasticpipe: the single command-line program. Every expected failure is
// an ep::Error, printed once as `ERROR: ...` with exit code 2.
#include <CLI/CLI.hpp>

#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "planner/config.hpp"
#include "planner/cost_model.hpp"
#include "planner/run_plan.hpp"
#include "planner/schedule.hpp"

namespace {

constexpr int kBadInput = 2;

struct PlanArgs {
  std::string config;
  std::vector<std::string> overrides;
  bool json = false;
};

struct ScheduleArgs {
  std::string config;
  std::vector<std::string> overrides;
  int K = 0;
  int M = 0;
  std::string kind;
  int v = 0;
  bool csv = false;
};

int run_plan_cmd(const PlanArgs& a) {
  const ep::Config config = ep::load_config(a.config, a.overrides);
  const ep::AnalyticCostModel cost(config.cluster, config.training);
  const ep::RunPlan run = ep::plan_run(config, cost);
  const ep::ModelSpec spec = ep::build_model_spec(config.model, config.training.precision);
  if (a.json)
    std::cout << ep::to_json(run, spec).dump(2) << "\n";
  else
    std::cout << ep::format_run_plan(run, spec);
  return 0;
}

ep::ScheduleKind parse_kind(const std::string& s) {
  if (s == "gpipe") return ep::ScheduleKind::GPipe;
  if (s == "1f1b") return ep::ScheduleKind::OneFOneB;
  if (s == "looping" || s == "looping_bf") return ep::ScheduleKind::LoopingBreadthFirst;
  if (s == "looping_df") return ep::ScheduleKind::LoopingDepthFirst;
  throw ep::Error("--kind: expected gpipe|1f1b|looping|looping_bf|looping_df, found '" + s + "'");
}

int run_schedule_cmd(const ScheduleArgs& a) {
  ep::ScheduleOptions o;
  o.kind = ep::ScheduleKind::GPipe;
  o.v = 1;
  if (!a.config.empty()) {  // defaults from the config's planner section
    const ep::Config config = ep::load_config(a.config, a.overrides);
    o.kind = config.planner.schedule;
    o.v = config.planner.virtual_stages;
  } else if (!a.overrides.empty()) {
    throw ep::Error("--set needs a CONFIG");
  }
  if (!a.kind.empty()) o.kind = parse_kind(a.kind);
  const bool looping = o.kind == ep::ScheduleKind::LoopingBreadthFirst ||
                       o.kind == ep::ScheduleKind::LoopingDepthFirst;
  if (a.v > 0) o.v = a.v;
  else if (looping && o.v == 1 && a.config.empty()) o.v = 2;
  o.K = a.K;
  o.M = a.M;
  const ep::Schedule schedule = ep::build_schedule(o);
  ep::check_schedule(schedule);
  if (a.csv) {
    std::cout << ep::to_csv(schedule);
    return 0;
  }
  // Unit costs: a device's forward of one micro-batch takes 1, its backward 2.
  const ep::Timeline t = ep::simulate(schedule, ep::unit_cost(1.0, 2.0, o.v));
  std::cout << ep::to_string(o.kind) << " K=" << o.K << " M=" << o.M << " v=" << o.v
            << " (unit costs: F = 1/v, B = 2/v per chunk; transfers free)\n"
            << ep::render_timeline(t, schedule) << "makespan " << t.makespan << ", bubble fraction "
            << t.bubble_fraction() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ElasticPipe: elastic pipelining with progressive layer freezing (PipeTransformer)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "elasticpipe 0.1");

  PlanArgs plan;
  auto* plan_cmd = app.add_subcommand("plan", "Print the whole training's plan timeline (one row per freeze step)");
  plan_cmd->add_option("config", plan.config, "TOML config file")->required()->check(CLI::ExistingFile);
  plan_cmd->add_option("--set", plan.overrides, "Override a config key, e.g. --set planner.alpha=0.2")
      ->take_all();
  plan_cmd->add_flag("--json", plan.json, "Print the plans as JSON (schema elasticpipe.plan/1)");

  ScheduleArgs sched;
  auto* sched_cmd = app.add_subcommand("schedule", "Print one pipeline schedule as a timeline under unit costs");
  sched_cmd->add_option("config", sched.config, "TOML config (optional: schedule kind and v defaults)")
      ->check(CLI::ExistingFile);
  sched_cmd->add_option("--set", sched.overrides, "Override a config key")->take_all();
  sched_cmd->add_option("--K", sched.K, "Pipeline length (devices)")->required()->check(CLI::Range(1, 1024));
  sched_cmd->add_option("--M", sched.M, "Micro-batches")->required()->check(CLI::Range(1, 100000));
  sched_cmd->add_option("--kind", sched.kind, "gpipe|1f1b|looping|looping_bf|looping_df");
  sched_cmd->add_option("--v", sched.v, "Chunks per device (looping)")->check(CLI::Range(1, 64));
  sched_cmd->add_flag("--csv", sched.csv, "Print the lowered schedule as CSV instead");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kBadInput;
  }
  try {
    if (*plan_cmd) return run_plan_cmd(plan);
    if (*sched_cmd) return run_schedule_cmd(sched);
  } catch (const ep::Error& e) {
    std::cerr << "ERROR: " << e.what() << "\n";
    return kBadInput;
  }
  return 0;
}
