#include "cli/common.hpp"

#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "planner/profile.hpp"

namespace ep::cli {

namespace {
std::string g_command_line;

// Beyond this a run takes many minutes and gigabytes (and runs out of
// memory well before the planner's limit).
constexpr int kMaxSimulatedDevices = 256;
}  // namespace

void set_command_line(int argc, char** argv) {
  g_command_line.clear();
  for (int i = 0; i < argc; ++i) g_command_line += (i ? " " : "") + std::string(argv[i]);
}

const std::string& command_line() { return g_command_line; }

std::string default_out(const std::string& config, const std::string& what) {
  return (std::filesystem::path("out") / what / std::filesystem::path(config).stem()).string();
}

std::function<void(double)> progress_bar(const std::string& label) {
  if (!isatty(STDOUT_FILENO)) return {};
  return [label](double f) {
    const int width = 30, done = static_cast<int>(f * width + 0.5);
    std::fprintf(stderr, "\r%s [%s%s] %3d%%", label.c_str(), std::string(done, '#').c_str(),
                 std::string(width - done, ' ').c_str(), static_cast<int>(f * 100 + 0.5));
    if (f >= 1.0) std::fprintf(stderr, "\r%*s\r", static_cast<int>(label.size()) + width + 8, "");
    std::fflush(stderr);
  };
}

void check_simulable(const Config& c) {
  if (c.cluster.total_gpus() > kMaxSimulatedDevices)
    throw c.error("cluster.nodes",
                  "at most " + std::to_string(kMaxSimulatedDevices) +
                      " devices to simulate, nodes x gpus_per_node (the simulator's time and memory grow with the "
                      "square of the devices: 128 take about a minute and 1 GB, 256 four minutes and 4 GB)",
                  std::to_string(c.cluster.nodes) + " x " + std::to_string(c.cluster.gpus_per_node));
}

std::optional<FittedCostModel> fitted_model(const std::string& profile_path, const Config& config,
                                            const CostModel& analytic) {
  if (profile_path.empty()) return std::nullopt;
  const Profile profile = read_profile(profile_path);
  check_profile_model(profile, profile_path, config.model, config.source);
  return std::optional<FittedCostModel>(std::in_place, profile, analytic);
}

}  // namespace ep::cli
