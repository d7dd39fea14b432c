// One file per command; each adds its subcommand to the app and returns
// what runs it once the command line has chosen it. main.cpp only wires.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace ep::cli {

struct Command {
  CLI::App* app = nullptr;
  std::function<int(int argc, char** argv)> run;  // argc/argv: train relaunches itself
};

Command add_plan(CLI::App&);
Command add_schedule(CLI::App&);
Command add_simulate(CLI::App&);
Command add_sweep(CLI::App&);
Command add_trace_diff(CLI::App&);  // `trace diff`
#if ELASTICPIPE_EXEC
Command add_train(CLI::App&);
Command add_profile(CLI::App&);
Command add_validate(CLI::App&);
#endif

}  // namespace ep::cli
