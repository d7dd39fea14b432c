// elasticpipe profile: measure this machine's executor into a profile for
// a fitted cost model.
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/common.hpp"
#include "cli/exec_commands.hpp"
#include "exec/blas.hpp"
#include "exec/profiler.hpp"
#include "planner/fitted_cost_model.hpp"
#include "planner/profile.hpp"
#include "traces/atomic_file.hpp"
#include "traces/output_dir.hpp"

namespace ep::cli {

namespace {

int run_profile(const ProfileArgs& a) {
  const Config config = load_checked_config(a.config, a.overrides);
  const std::string out =
      a.out.empty() ? (std::filesystem::path("out") / "profile" / (std::filesystem::path(a.config).stem().string() + ".json")).string()
                    : a.out;
  exec::ProfileOptions o;
  o.repeats = a.repeats;
  o.log = [](const std::string& line) { std::cout << line << std::endl; };
  refuse_output_over_input(out, "--out", {a.config});
  const std::string dir = std::filesystem::path(out).parent_path().string();
  if (!dir.empty()) create_output_dir(dir, "--out");  // before measuring: a bad --out loses nothing
  if (const std::string w = exec::blas_warning(); !w.empty()) std::cerr << "WARNING: " << w << "\n";
  const Profile profile = exec::profile_executor(config, o);
  write_file_atomically(out, [&](const std::string& temp) { write_profile(profile, temp); });
  const AnalyticCostModel analytic(config.cluster, config.training);
  const FittedCostModel fitted(profile, analytic);
  std::cout << fitted.describe();
  for (const std::string& c : fitted.cautions()) std::cout << "note: " << c << "\n";
  std::cout << "wrote " << out << "\n";
  return 0;
}

}  // namespace

Command add_profile(CLI::App& app) {
  auto a = std::make_shared<ProfileArgs>();
  return {add_profile_options(app, *a), [a](int, char**) { return run_profile(*a); }};
}

}  // namespace ep::cli
