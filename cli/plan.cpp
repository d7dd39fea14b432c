// elasticpipe plan: the whole training's plan timeline, as text or JSON.
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "planner/model_spec.hpp"
#include "planner/run_plan.hpp"

namespace ep::cli {

namespace {
struct PlanArgs {
  std::string config;
  std::vector<std::string> overrides;
  bool json = false;
};

int run_plan(const PlanArgs& a) {
  const Config config = load_checked_config(a.config, a.overrides);
  const AnalyticCostModel cost(config.cluster, config.training);
  const RunPlan run = plan_run(config, cost);
  const ModelSpec spec = build_model_spec(config.model, config.training.precision);
  if (a.json)
    std::cout << to_json(run, spec).dump(2) << "\n";
  else
    std::cout << format_run_plan(run, spec);
  return 0;
}
}  // namespace

Command add_plan(CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  auto* cmd = app.add_subcommand("plan", "Print the whole training's plan timeline (one row per freeze step)");
  cmd->add_option("config", a->config, "TOML config file")->required();
  cmd->add_option("--set", a->overrides, "Override a config key, e.g. --set planner.alpha=0.2")->take_all();
  cmd->add_flag("--json", a->json, "Print the plans as JSON (schema elasticpipe.plan/2)");
  return {cmd, [a](int, char**) { return run_plan(*a); }};
}

}  // namespace ep::cli
