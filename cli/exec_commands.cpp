#include "cli/exec_commands.hpp"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "cli/common.hpp"
#include "planner/error.hpp"

namespace ep::cli {

namespace {

// One machine's processes: each rank is a whole LibTorch process with its
// own threads and memory; a larger job spans machines (torchrun, mpirun).
constexpr int kMaxLocalProcesses = 256;

constexpr const char* kExecProgram = "elasticpipe-exec";

// Replaces this process with elasticpipe-exec on the same command line.
int hand_over(char** argv) {
  const std::filesystem::path self = std::filesystem::canonical("/proc/self/exe");
  const std::string program = (self.parent_path() / kExecProgram).string();
  ::execv(program.c_str(), argv);  // returns only on failure
  throw Error(std::string(argv[1]) + " runs in " + program + ", which cannot be started (" + std::strerror(errno) +
              "): build with -DELASTICPIPE_EXEC=ON (LibTorch)");
}

// OpenMP reads OMP_NUM_THREADS when LibTorch loads and, given a value it
// cannot use, warns on stderr and runs on its own default: refused here,
// before it loads.
void check_thread_env() {
  const char* v = std::getenv("OMP_NUM_THREADS");
  if (!v) return;
  const std::string text = v;
  bool ok = !text.empty();
  for (std::size_t i = 0, start = 0; ok && i <= text.size(); ++i) {
    if (i < text.size() && text[i] != ',') {
      ok = std::isdigit(static_cast<unsigned char>(text[i])) && i - start < 6;
      continue;
    }
    ok = i > start && std::stol(text.substr(start, i - start)) >= 1;
    start = i + 1;
  }
  if (!ok)
    throw Error("environment variable OMP_NUM_THREADS: expected a positive number of threads (or a list of them, "
                "one per nesting level), or unset, found '" + text + "'");
}

// Runs `cmd` here as far as its input goes: the config with its overrides
// (and `also` on it), then hands it over. elasticpipe-exec loads the same
// files again; they are small and bounded.
Command handed_over(CLI::App* cmd, std::shared_ptr<const ExecArgs> a,
                    std::function<void(const Config&)> also = {}) {
  return {cmd, [a = std::move(a), also = std::move(also)](int, char** argv) {
            const Config config = load_checked_config(a->config, a->overrides);
            check_runnable_here(config);
            check_thread_env();
            if (also) also(config);
            return hand_over(argv);
          }};
}

void add_config_options(CLI::App* cmd, ExecArgs& a) {
  cmd->add_option("config", a.config, "TOML config file")->required();
  cmd->add_option("--set", a.overrides, "Override a config key")->take_all();
}

}  // namespace

CLI::App* add_train_options(CLI::App& app, TrainArgs& a) {
  auto* cmd = app.add_subcommand(
      "train", "Train for real with LibTorch: one process per pipeline (--nproc N here; or torchrun/mpirun)");
  add_config_options(cmd, a);
  cmd->add_option("--out", a.out, "Output folder (default out/train/<config name>)")
      ->check(non_empty("an output folder"));
  cmd->add_option("--nproc", a.nproc, "Start this many local processes (one per device of the config's cluster)")
      ->check(in_range(1, kMaxLocalProcesses,
                       "each rank is a LibTorch process with its own threads and memory; a larger job spans "
                       "machines: use torchrun or mpirun"));
  cmd->add_option("--resume", a.resume,
                  "Continue from a checkpoint directory (e.g. OUT/checkpoints); auto: from OUT/checkpoints when it "
                  "holds one, else from the beginning (for a launcher's restarts)")
      ->check(non_empty("a checkpoint directory"));
  cmd->add_option("--progress-every", a.progress_every_s,
                  "Seconds between progress lines within an epoch when stdout is not a terminal (default 30)")
      ->check(CLI::Validator(
          [](const std::string& v) {
            char* end = nullptr;
            const double x = std::strtod(v.c_str(), &end);
            if (!v.empty() && end == v.c_str() + v.size() && std::isfinite(x) && x >= 0.1 && x <= 86400)
              return std::string();
            return "expected a number of seconds in [0.1, 86400], found '" + printable(v) + "'";
          },
          "SECONDS"));
  return cmd;
}

CLI::App* add_profile_options(CLI::App& app, ProfileArgs& a) {
  auto* cmd = app.add_subcommand("profile", "Measure this machine's executor (compute, hand-over, all-reduce, cache, "
                                            "optimizer, transitions) into a profile for a fitted cost model");
  add_config_options(cmd, a);
  cmd->add_option("--out", a.out, "Profile file (default out/profile/<config name>.json)")
      ->check(non_empty("a profile file to write"));
  cmd->add_option("--repeats", a.repeats, "Timed runs per figure (median)")->check(in_range(1, 1000));
  return cmd;
}

CLI::App* add_validate_options(CLI::App& app, ValidateArgs& a) {
  auto* cmd = app.add_subcommand("validate", "Run plans for real and in simulation with a fitted cost model; "
                                             "print the error table (MAPE, max error, Kendall tau)");
  add_config_options(cmd, a);
  cmd->add_option("--profile", a.profile, "Profile file (elasticpipe profile)")
      ->required()
      ->check(non_empty("a profile file"));
  cmd->add_option("--iterations", a.iterations, "Timed iterations per plan and pass")->check(in_range(1, 1000));
  cmd->add_option("--rounds", a.rounds,
                  "Passes over all plans (alternately forward and backward); each plan's median pass is compared")
      ->check(in_range(1, 100));
  cmd->add_flag("--fit-factors", a.fit_factors,
                "Also fit one measured/simulated factor per (K, replicas) on the M = 2K plans and report the "
                "held-out error with it");
  return cmd;
}

std::vector<Command> add_handed_over_commands(CLI::App& app) {
  auto train = std::make_shared<TrainArgs>();
  auto profile = std::make_shared<ProfileArgs>();
  auto validate = std::make_shared<ValidateArgs>();
  return {handed_over(add_train_options(app, *train), train),
          handed_over(add_profile_options(app, *profile), profile),
          handed_over(add_validate_options(app, *validate), validate, [validate](const Config& config) {
            const AnalyticCostModel analytic(config.cluster, config.training);
            (void)fitted_model(validate->profile, config, analytic);
          })};
}

}  // namespace ep::cli
