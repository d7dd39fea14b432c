#include "cli/common.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "exec/exec_config.hpp"
#include "exec/launch.hpp"
#include "planner/error.hpp"
#include "planner/profile.hpp"
#include "sim/collectives.hpp"
#include "sim/sim_config.hpp"

namespace ep::cli {

namespace {
std::string g_command_line;

// The step model simulates every flow of every replica's rings: beyond
// this it takes many minutes and gigabytes. The coarser collective models
// simulate two nodes for all and go to the planner's limit.
constexpr int kMaxStepDevices = 256;
}  // namespace

void print_error(const std::string& message, int exit_code, bool peer) {
  const std::string line = "ERROR: " + printable(message, 1000) + "\n";
  struct stat st {};
  if (const char* fd_text = std::getenv(kErrorFdVariable);
      fd_text && ::fstat(std::atoi(fd_text), &st) == 0 && S_ISFIFO(st.st_mode)) {  // the launcher's pipe, no other file
    const std::string sent = std::to_string(exit_code) + (peer ? " peer " : " cause ") + line;  // under PIPE_BUF: written whole
    const ssize_t n = ::write(std::atoi(fd_text), sent.data(), sent.size());
    // Full (EAGAIN): earlier errors of the job are queued, the first is printed.
    if (n == static_cast<ssize_t>(sent.size()) || (n < 0 && errno == EAGAIN)) return;
  }
  std::fputs(line.c_str(), stderr);
}

int report_error(const std::exception& e) {
  if (dynamic_cast<const Error*>(&e) != nullptr) {
    print_error(e.what(), kBadInput, dynamic_cast<const exec::PeerError*>(&e) != nullptr);
    return kBadInput;
  }
  // A library's failure (c10d, I/O): not bad input, still one clear line.
  const std::string what = e.what();
  print_error(what.substr(0, what.find('\n')), 1);
  return 1;
}

CLI::Validator non_empty(const std::string& what) {
  return CLI::Validator(
      [what](const std::string& value) { return value.empty() ? "expected " + what + ", found ''" : std::string(); },
      "NON-EMPTY");
}

CLI::Validator in_range(std::int64_t lo, std::int64_t hi, const std::string& why) {
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [=](const std::string& value) {
        std::int64_t v = 0;
        const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
        if (!value.empty() && ec == std::errc() && end == value.data() + value.size() && v >= lo && v <= hi)
          return std::string();
        return "expected an integer in " + range + (why.empty() ? "" : " (" + why + ")") + ", found '" +
               printable(value) + "'";
      },
      "INT in " + range);
}

void set_command_line(int argc, char** argv) {
  g_command_line.clear();
  for (int i = 0; i < argc; ++i) g_command_line += (i ? " " : "") + std::string(argv[i]);
}

const std::string& command_line() { return g_command_line; }

void check_runnable_here(const Config& c) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (c.threads_per_worker > cores)
    throw c.error("exec.threads_per_worker", "at most this machine's " + std::to_string(cores) + " cores (0: cores / K)",
                  std::to_string(c.threads_per_worker));
}

void refuse_output_over_input(const std::string& output, const std::string& flag,
                              const std::vector<std::string>& inputs) {
  std::error_code ec;
  for (const std::string& in : inputs)
    if (std::filesystem::equivalent(output, in, ec) && !ec)
      throw Error(flag + " " + output + ": this is the input " + in +
                  " of the command; writing it would destroy what the command reads. Name another file");
}

std::string default_out(const std::string& config, const std::string& what) {
  return (std::filesystem::path("out") / what / std::filesystem::path(config).stem()).string();
}

std::string bar_text(double f, int width) {
  const int done = std::clamp(static_cast<int>(f * width + 0.5), 0, width);
  char pct[8];
  std::snprintf(pct, sizeof pct, "%3d%%", static_cast<int>(f * 100 + 0.5));
  return "[" + std::string(done, '#') + std::string(width - done, ' ') + "] " + pct;
}

std::function<void(double)> progress_bar(const std::string& label) {
  if (!isatty(STDOUT_FILENO)) return {};
  return [label](double f) {
    const int width = 30;
    std::fprintf(stderr, "\r%s %s", label.c_str(), bar_text(f, width).c_str());
    if (f >= 1.0) std::fprintf(stderr, "\r%*s\r", static_cast<int>(label.size()) + width + 8, "");
    std::fflush(stderr);
  };
}

Config load_checked_config(const std::string& path, const Overrides& overrides) {
  Config c = load_config(path, overrides);
  (void)sim::read_sim_config(c);
  (void)exec::read_exec_config(c);
  return c;
}

void check_simulable(const Config& c) {
  const std::string collectives = sim::read_sim_config(c).collectives;
  if (!sim::find_collective_model(collectives)->two_nodes_stand_for_all() &&
      c.cluster.total_gpus() > kMaxStepDevices)
    throw c.error("cluster.nodes",
                  "at most " + std::to_string(kMaxStepDevices) +
                      " devices to simulate with sim.collectives = \"" + collectives +
                      "\", nodes x gpus_per_node (it simulates every replica's rings: time and memory grow with "
                      "the square of the devices); "
                      "sim.collectives = \"phases\" simulates up to " + std::to_string(kMaxClusterDevices),
                  std::to_string(c.cluster.nodes) + " x " + std::to_string(c.cluster.gpus_per_node));
}

std::optional<FittedCostModel> fitted_model(const std::string& profile_path, const Config& config,
                                            const CostModel& analytic) {
  if (profile_path.empty()) return std::nullopt;
  const Profile profile = read_profile(profile_path);
  check_profile_model(profile, profile_path, config);
  std::optional<FittedCostModel> model(std::in_place, profile, analytic);
  for (const std::string& c : model->cautions()) std::cerr << "note: " << profile_path << ": " << c << "\n";
  return model;
}

}  // namespace ep::cli
