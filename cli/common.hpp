// What the commands share: the exit code for bad input, output folders,
// progress, and the checks every simulating command makes. Each command
// lives in its own file and registers itself on the app (commands.hpp).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "planner/config.hpp"
#include "planner/cost_model.hpp"
#include "planner/fitted_cost_model.hpp"

namespace ep::cli {

constexpr int kBadInput = 2;

// One refusal, one line: "ERROR: " and the message (printable: a file's
// bytes echoed in it never break the line). A rank of `train --nproc` sends
// it to its launcher instead, as "<exit code> <cause|peer> ERROR: ...":
// `peer` when it met the failure communicating with other ranks
// (exec::PeerError), which may be another rank's failure seen from here.
// The launcher prints the job's first cause (cli/train.cpp).
void print_error(const std::string& message, int exit_code = kBadInput, bool peer = false);
// Prints a failure as print_error does and returns its exit code: an
// ep::Error is bad input (kBadInput, the whole message); anything else is a
// library's failure (1, its first line).
int report_error(const std::exception& e);
// The variable that hands a rank the launcher's error pipe (a descriptor).
constexpr const char* kErrorFdVariable = "ELASTICPIPE_ERROR_FD";

// Argument checks, run by CLI11 before a value is converted: an empty value
// is refused (an empty path is never meant as the default; `what` says what
// is expected), and an integer must lie in [lo, hi] (`why` says why, when
// the bound needs it).
[[nodiscard]] CLI::Validator non_empty(const std::string& what);
[[nodiscard]] CLI::Validator in_range(std::int64_t lo, std::int64_t hi, const std::string& why = "");

// The whole command line, for the output folder's lock (who holds it).
void set_command_line(int argc, char** argv);
[[nodiscard]] const std::string& command_line();

// out/<what>/<config's file name without extension>
[[nodiscard]] std::string default_out(const std::string& config, const std::string& what);

// Refuses (a config error) what cannot run on this machine though the
// config is valid elsewhere: more intra-op threads per stage worker than
// the machine has cores (they only wait for each other; 4,096 took 74 s
// and 2.3 GB for one 64-sample iteration).
// Checked once, where elasticpipe hands train, validate and profile over
// (exec_commands.cpp).
void check_runnable_here(const Config&);

// Refuses (ep::Error) an output file that is one of the command's inputs:
// writing it would destroy what the command reads. Inputs that do not
// exist are left to the command's own error.
void refuse_output_over_input(const std::string& output, const std::string& flag,
                              const std::vector<std::string>& inputs);

// "[#####     ]  50%": `fraction` done of a bar `width` wide.
[[nodiscard]] std::string bar_text(double fraction, int width);
// A bar on stderr, only when stdout is a terminal; empty otherwise.
[[nodiscard]] std::function<void(double)> progress_bar(const std::string& label);

// load_config, and the back ends' sections ([sim], [exec]) checked too:
// every command refuses a bad key of the file, whichever part reads it.
[[nodiscard]] Config load_checked_config(const std::string& path, const Overrides& overrides);

// No more devices than the collective model (sim.collectives) simulates:
// where it simulates every replica, time and memory grow with the square
// of the devices. Throws a config error otherwise.
void check_simulable(const Config&);

// The cost model fitted to a profile, or nullopt without one. A profile
// holds for the model it was recorded on: another model's is refused.
[[nodiscard]] std::optional<FittedCostModel> fitted_model(const std::string& profile_path, const Config& config,
                                                          const CostModel& analytic);

}  // namespace ep::cli
