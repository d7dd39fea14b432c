// The commands that run LibTorch (train, profile, validate): their options,
// without LibTorch. elasticpipe parses them, refuses bad input (an
// argument, the config with its overrides, validate's profile) in
// milliseconds, and hands the command line over to elasticpipe-exec, which
// parses it again and runs it: LibTorch takes 0.4-2 s and 0.2-0.5 GB to
// load before anything is read.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "cli/commands.hpp"

namespace ep::cli {

struct ExecArgs {
  std::string config;
  std::vector<std::string> overrides;
};

// --resume auto: the run's own last checkpoint, where there is one.
inline constexpr const char* kResumeAuto = "auto";

struct TrainArgs : ExecArgs {
  std::string out;
  int nproc = 0;
  std::string resume;  // a checkpoint directory, or kResumeAuto
  double progress_every_s = 30;  // without a terminal: a progress line this often within an epoch
};

struct ProfileArgs : ExecArgs {
  std::string out;
  int repeats = 5;
};

struct ValidateArgs : ExecArgs {
  std::string profile;
  int iterations = 5;
  int rounds = 3;
  bool fit_factors = false;
};

// Each adds its subcommand and options to `app`, parsing into `a`.
CLI::App* add_train_options(CLI::App& app, TrainArgs& a);
CLI::App* add_profile_options(CLI::App& app, ProfileArgs& a);
CLI::App* add_validate_options(CLI::App& app, ValidateArgs& a);

// train, profile and validate as elasticpipe runs them: checked, then
// handed over to elasticpipe-exec beside it.
[[nodiscard]] std::vector<Command> add_handed_over_commands(CLI::App& app);

}  // namespace ep::cli
