// What the commands share: the exit code for bad input, output folders,
// progress, and the checks every simulating command makes. Each command
// lives in its own file and registers itself on the app (commands.hpp).
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "planner/config.hpp"
#include "planner/cost_model.hpp"
#include "planner/fitted_cost_model.hpp"

namespace ep::cli {

constexpr int kBadInput = 2;

// The whole command line, for the output folder's lock (who holds it).
void set_command_line(int argc, char** argv);
[[nodiscard]] const std::string& command_line();

// out/<what>/<config's file name without extension>
[[nodiscard]] std::string default_out(const std::string& config, const std::string& what);

// A bar on stderr, only when stdout is a terminal; empty otherwise.
[[nodiscard]] std::function<void(double)> progress_bar(const std::string& label);

// The simulator models every device, link and flow; its time and memory
// grow with the square of the devices. Throws a config error beyond that.
void check_simulable(const Config&);

// The cost model fitted to a profile, or nullopt without one. A profile
// holds for the model it was recorded on: another model's is refused.
[[nodiscard]] std::optional<FittedCostModel> fitted_model(const std::string& profile_path, const Config& config,
                                                          const CostModel& analytic);

}  // namespace ep::cli
