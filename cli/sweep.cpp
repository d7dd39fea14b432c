// elasticpipe sweep: the cartesian product of --set lists, each point a
// whole simulated training, points in parallel.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "planner/modes.hpp"
#include "sim/driver.hpp"
#include "traces/atomic_file.hpp"
#include "traces/output_dir.hpp"

namespace ep::cli {

namespace {
struct SweepArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::string mode = "all";
  std::string out;
  bool exact = false;
  int jobs = 0;
};

// "a=1,2,3" -> {"a=1", "a=2", "a=3"}; commas inside [] stay (TOML arrays).
std::vector<std::string> sweep_values(const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos) throw Error("--set '" + assignment + "': expected KEY=V1,V2,...");
  const std::string key = assignment.substr(0, eq + 1);
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  for (char ch : assignment.substr(eq + 1)) {
    if (ch == '[') ++depth;
    if (ch == ']') --depth;
    if (ch == ',' && depth == 0) {
      out.push_back(key + cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  out.push_back(key + cur);
  return out;
}

// Each point is a whole simulated training (about a second per mode on a
// core): a sweep larger than this is a mistake or a job for several runs.
constexpr std::size_t kMaxSweepPoints = 1000;

// Progress: a bar on a terminal, else a line on stderr every 5% (or every
// point of a small sweep), so that a long sweep in a log shows it is alive.
std::function<void(std::size_t)> sweep_progress(std::size_t total) {
  if (const auto bar = progress_bar("sweeping"))
    return [bar, total](std::size_t done) { bar(static_cast<double>(done) / static_cast<double>(total)); };
  const auto start = std::chrono::steady_clock::now();
  return [start, total, last = std::size_t{0}](std::size_t done) mutable {
    const std::size_t step = std::max<std::size_t>(1, total / 20);
    if (done != total && done < last + step) return;
    last = done;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "sweep: %zu/%zu points done (%.0f%%), %.0f s elapsed, about %.0f s left\n", done, total,
                 100.0 * static_cast<double>(done) / static_cast<double>(total), elapsed,
                 elapsed / static_cast<double>(done) * static_cast<double>(total - done));
  };
}

int run_sweep(const SweepArgs& a) {
  // The cartesian product of every --set list, its size checked before it
  // is built.
  std::vector<std::vector<std::string>> lists;
  std::size_t size = 1;
  for (const auto& set : a.overrides) {
    lists.push_back(sweep_values(set));
    size *= lists.back().size();
    if (size > kMaxSweepPoints)
      throw Error("--set: the sweep has more than " + std::to_string(kMaxSweepPoints) +
                      " points (each is a whole simulated training, about a second per mode on a core); "
                      "split it into several sweeps");
  }
  std::vector<std::vector<std::string>> points{{}};
  for (const auto& values : lists) {
    std::vector<std::vector<std::string>> next;
    for (const auto& p : points)
      for (const auto& v : values) {
        next.push_back(p);
        next.back().push_back(v);
      }
    points = std::move(next);
  }
  // Validate every point before running any: bad input loses nothing.
  for (const auto& p : points) check_simulable(load_config(a.config, p));
  const auto modes = parse_modes(a.mode == "all" ? "baseline,autocache" : a.mode);
  const int jobs = a.jobs > 0 ? a.jobs : std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  const std::string out = a.out.empty() ? default_out(a.config, "sweep") : a.out;
  const OutputDirLock lock(out, command_line(), "--out");
  std::printf("sweep: %zu point%s x %zu mode%s, %d at a time\n", points.size(), points.size() == 1 ? "" : "s",
              modes.size(), modes.size() == 1 ? "" : "s", jobs);
  std::fflush(stdout);
  auto progress = sweep_progress(points.size());

  // SimGrid allows one engine per process: every point runs in a child,
  // which writes its summary JSON to a pipe.
  struct Child { pid_t pid; int fd; std::size_t point; };
  std::vector<Child> running;
  std::vector<std::string> results(points.size());
  std::size_t next = 0, done = 0;
  const auto reap = [&] {
    Child c = running.front();
    running.erase(running.begin());
    std::string text;
    char buf[4096];
    for (ssize_t n; (n = read(c.fd, buf, sizeof buf)) > 0;) text.append(buf, n);
    close(c.fd);
    int status = 0;
    waitpid(c.pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      throw Error("sweep point " + std::to_string(c.point) + " failed: " + text);
    results[c.point] = text;
    progress(++done);
  };
  while (next < points.size() || !running.empty()) {
    if (next < points.size() && static_cast<int>(running.size()) < jobs) {
      int fds[2];
      if (pipe(fds) != 0) throw Error("sweep: pipe failed");
      std::fflush(nullptr);
      const pid_t pid = fork();
      if (pid < 0) throw Error("sweep: fork failed");
      if (pid == 0) {
        close(fds[0]);
        std::string text;
        int rc = 0;
        try {
          const Config config = load_config(a.config, points[next]);
          sim::RunOptions opt;
          opt.modes = modes;
          opt.exact = a.exact;
          sim::Simulator sim(config.cluster);
          nlohmann::json j;
          for (const auto& m : sim::simulate_training(config, opt, sim).summary.modes)
            j[m.mode] = {{"total_s", m.total_s}, {"speedup", m.speedup}, {"samples_per_s", m.samples_per_s}};
          text = j.dump();
        } catch (const std::exception& e) {
          text = e.what();
          rc = 1;
        }
        if (write(fds[1], text.data(), text.size()) < 0) rc = 1;
        _exit(rc);
      }
      close(fds[1]);
      running.push_back({pid, fds[0], next++});
    } else {
      reap();
    }
  }

  AtomicFile csv_file((std::filesystem::path(out) / "sweep.csv").string());
  std::ostream& csv = csv_file.stream();
  std::vector<std::string> keys;
  for (const auto& set : a.overrides) keys.push_back(set.substr(0, set.find('=')));
  for (const auto& k : keys) {
    std::cout << k << "  ";
    csv << k << ",";
  }
  std::cout << "\n";
  for (std::size_t m = 0; m < modes.size(); ++m) {
    const std::string name = sim::to_string(modes[m]);
    csv << name << "_total_s," << name << "_speedup" << (m + 1 < modes.size() ? "," : "\n");
  }
  for (std::size_t i = 0; i < points.size(); ++i) {
    const nlohmann::json j = nlohmann::json::parse(results[i]);
    for (const auto& v : points[i]) {
      const std::string value = v.substr(v.find('=') + 1);
      std::cout << value << "  ";
      csv << value << ",";
    }
    for (std::size_t m = 0; m < modes.size(); ++m) {
      const auto& r = j.at(sim::to_string(modes[m]));
      char cell[96];
      std::snprintf(cell, sizeof cell, "%s %.1f s (%.2fx)  ", sim::to_string(modes[m]).c_str(),
                    r.at("total_s").get<double>(), r.at("speedup").get<double>());
      std::cout << cell;
      csv << r.at("total_s").get<double>() << "," << r.at("speedup").get<double>() << (m + 1 < modes.size() ? "," : "\n");
    }
    std::cout << "\n";
  }
  csv_file.commit();
  std::cout << "wrote " << csv_file.path() << "\n";
  return 0;
}

}  // namespace

Command add_sweep(CLI::App& app) {
  auto a = std::make_shared<SweepArgs>();
  auto* cmd = app.add_subcommand("sweep", "Simulate the cartesian product of --set lists, e.g. --set planner.alpha=0.2,0.33,0.5");
  cmd->add_option("config", a->config, "TOML config file")->required()->check(CLI::ExistingFile);
  cmd->add_option("--set", a->overrides, "KEY=V1,V2,... (one list per key)")->take_all();
  cmd->add_option("--mode", a->mode, "Modes per point (default baseline,autocache)");
  cmd->add_option("--out", a->out, "Output folder (default out/sweep/<config name>)");
  cmd->add_option("--jobs", a->jobs, "Points simulated at once (default: cores)")->check(CLI::Range(1, 256));
  cmd->add_flag("--exact", a->exact, "Simulate every iteration");
  return {cmd, [a](int, char**) { return run_sweep(*a); }};
}

}  // namespace ep::cli
