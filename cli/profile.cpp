// elasticpipe profile: measure this machine's executor into a profile for
// a fitted cost model.
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "exec/blas.hpp"
#include "exec/profiler.hpp"
#include "planner/fitted_cost_model.hpp"
#include "planner/profile.hpp"
#include "traces/atomic_file.hpp"
#include "traces/output_dir.hpp"

namespace ep::cli {

namespace {
struct ProfileArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::string out;
  int repeats = 5;
};

int run_profile(const ProfileArgs& a) {
  const Config config = load_config(a.config, a.overrides);
  const std::string out =
      a.out.empty() ? (std::filesystem::path("out") / "profile" / (std::filesystem::path(a.config).stem().string() + ".json")).string()
                    : a.out;
  exec::ProfileOptions o;
  o.repeats = a.repeats;
  o.log = [](const std::string& line) { std::cout << line << std::endl; };
  const std::string dir = std::filesystem::path(out).parent_path().string();
  if (!dir.empty()) create_output_dir(dir, "--out");  // before measuring: a bad --out loses nothing
  if (const std::string w = exec::blas_warning(); !w.empty()) std::cerr << "WARNING: " << w << "\n";
  const Profile profile = exec::profile_executor(config, o);
  write_file_atomically(out, [&](const std::string& temp) { write_profile(profile, temp); });
  const AnalyticCostModel analytic(config.cluster, config.training);
  std::cout << FittedCostModel(profile, analytic).describe() << "wrote " << out << "\n";
  return 0;
}

}  // namespace

Command add_profile(CLI::App& app) {
  auto a = std::make_shared<ProfileArgs>();
  auto* cmd = app.add_subcommand("profile", "Measure this machine's executor (compute, hand-over, all-reduce, cache, "
                                            "optimizer, transitions) into a profile for a fitted cost model");
  cmd->add_option("config", a->config, "TOML config file")->required();
  cmd->add_option("--set", a->overrides, "Override a config key")->take_all();
  cmd->add_option("--out", a->out, "Profile file (default out/profile/<config name>.json)")
      ->check(non_empty("a profile file to write"));
  cmd->add_option("--repeats", a->repeats, "Timed runs per figure (median)")->check(in_range(1, 1000));
  return {cmd, [a](int, char**) { return run_profile(*a); }};
}

}  // namespace ep::cli
