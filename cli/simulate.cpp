// elasticpipe simulate: the whole training on a SimGrid model of the
// cluster: the best plan without freezing, the paper's baseline, every mode
// of the speedup breakdown and the config as train runs it.
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "planner/modes.hpp"
#include "sim/driver.hpp"
#include "traces/output_dir.hpp"

namespace ep::cli {

namespace {
struct SimulateArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::string mode = "all";
  std::string reference = "baseline";
  std::string out;
  std::string profile;  // a fitted cost model instead of the analytic one
  bool exact = false;
};

int run_simulate(const SimulateArgs& a) {
  const Config config = load_checked_config(a.config, a.overrides);
  check_simulable(config);
  sim::RunOptions opt;
  opt.modes = parse_modes(a.mode);
  opt.reference = parse_reference(a.reference);
  opt.exact = a.exact;
  const AnalyticCostModel analytic(config.cluster, config.training);
  const std::optional<FittedCostModel> fitted = fitted_model(a.profile, config, analytic);
  if (fitted) opt.cost = &*fitted;
  const std::string out = a.out.empty() ? default_out(a.config, "simulate") : a.out;
  const OutputDirLock lock(out, command_line(), "--out");
  opt.progress = progress_bar("simulating");
  sim::Simulator sim(config.cluster);
  const sim::RunResult r = sim::simulate_training(config, opt, sim);
  std::cout << sim::format_result(r) << std::flush;
  sim::write_outputs(r, out);
  std::cout << "\nwrote " << out << "/{summary.json,epochs.csv,chunks.csv" << (r.trace.events.empty() ? "" : ",trace.json")
            << "}\n";
  return 0;
}
}  // namespace

Command add_simulate(CLI::App& app) {
  auto a = std::make_shared<SimulateArgs>();
  auto* cmd = app.add_subcommand("simulate", "Simulate the whole training on a SimGrid model of the cluster");
  cmd->add_option("config", a->config, "TOML config file")->required();
  cmd->add_option("--mode", a->mode,
                  "all|baseline|gpipe|freeze|autopipe|autodp|autocache|configured (comma-separated; default all)");
  cmd->add_option("--reference", a->reference,
                  "Speedups over: baseline (the best plan without freezing, default) or gpipe (the paper's)");
  cmd->add_option("--set", a->overrides, "Override a config key")->take_all();
  cmd->add_option("--out", a->out, "Output folder (default out/simulate/<config name>)")
      ->check(non_empty("an output folder"));
  cmd->add_flag("--exact", a->exact, "Simulate every iteration instead of scaling the steady state");
  cmd->add_option("--profile", a->profile,
                  "Cost model fitted to a profile (elasticpipe profile) instead of the analytic one")
      ->check(non_empty("a profile file"));
  return {cmd, [a](int, char**) { return run_simulate(*a); }};
}

}  // namespace ep::cli
