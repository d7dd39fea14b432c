// elasticpipe sweep: the cartesian product of --set lists, each point a
// whole simulated training (sim/sweep.hpp); this file parses the flags,
// prints the table and writes sweep.csv (traces/sweep_csv.hpp).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "planner/modes.hpp"
#include "sim/driver.hpp"
#include "sim/sweep.hpp"
#include "traces/atomic_file.hpp"
#include "traces/output_dir.hpp"
#include "traces/sweep_csv.hpp"

namespace ep::cli {

namespace {
struct SweepArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::string mode = "baseline,configured";
  std::string reference = "baseline";
  std::string out;
  bool exact = false;
  int jobs = 0;
};

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
  const std::vector<Overrides> points = sim::sweep_points(a.overrides);
  // Validate every point before running any: bad input loses nothing.
  std::vector<Config> configs;
  for (const auto& p : points) {
    configs.push_back(load_checked_config(a.config, p));
    check_simulable(configs.back());
  }
  sim::SweepOptions opt;
  opt.reference = parse_reference(a.reference);
  opt.modes = with_reference(parse_modes(a.mode), opt.reference);
  opt.exact = a.exact;
  opt.jobs = a.jobs > 0 ? a.jobs : std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  const std::string out = a.out.empty() ? default_out(a.config, "sweep") : a.out;
  const OutputDirLock lock(out, command_line(), "--out");
  std::printf("sweep: %zu point%s x %zu mode%s, %d at a time\n", points.size(), points.size() == 1 ? "" : "s",
              opt.modes.size(), opt.modes.size() == 1 ? "" : "s", opt.jobs);
  std::fflush(stdout);
  opt.progress = sweep_progress(points.size());
  const auto results = sim::run_sweep(configs, points, opt);

  trace::SweepTable table;
  for (const auto& set : a.overrides) table.keys.push_back(set.substr(0, set.find('=')));
  for (const Mode m : opt.modes) table.modes.push_back(sim::to_string(m));
  for (const auto& k : table.keys) std::cout << k << "  ";
  std::cout << "\n";
  for (std::size_t i = 0; i < points.size(); ++i) {
    trace::SweepRow row;
    for (const auto& v : points[i]) {
      row.values.push_back(v.substr(v.find('=') + 1));
      std::cout << row.values.back() << "  ";
    }
    for (const sim::SweepModeResult& r : results[i]) {
      char cell[160];
      char speedup[32] = "n/a";
      if (r.speedup) std::snprintf(speedup, sizeof speedup, "%.2fx", *r.speedup);
      std::snprintf(cell, sizeof cell, "%s %.1f s (%s, batch %lld%s)  ", sim::to_string(r.mode).c_str(), r.total_s,
                    speedup, static_cast<long long>(r.global_batch), r.fits_memory ? "" : ", DOES NOT FIT");
      std::cout << cell;
      row.modes.push_back({r.total_s, r.speedup, r.fits_memory, r.global_batch, r.updates});
    }
    std::cout << "\n";
    table.rows.push_back(std::move(row));
  }
  AtomicFile csv((std::filesystem::path(out) / "sweep.csv").string());
  trace::write_sweep_csv(table, csv.stream(), csv.path());
  csv.commit();
  std::cout << "wrote " << csv.path() << "\n";
  return 0;
}

}  // namespace

Command add_sweep(CLI::App& app) {
  auto a = std::make_shared<SweepArgs>();
  auto* cmd = app.add_subcommand("sweep", "Simulate the cartesian product of --set lists, e.g. --set planner.alpha=0.2,0.33,0.5");
  cmd->add_option("config", a->config, "TOML config file")->required();
  cmd->add_option("--set", a->overrides, "KEY=V1,V2,... (one list per key)")->take_all();
  cmd->add_option("--mode", a->mode, "Modes per point (default baseline,configured; all: every mode)");
  cmd->add_option("--reference", a->reference,
                  "Speedups over: baseline (the best plan without freezing, default) or gpipe (the paper's)");
  cmd->add_option("--out", a->out, "Output folder (default out/sweep/<config name>)")
      ->check(non_empty("an output folder"));
  cmd->add_option("--jobs", a->jobs, "Points simulated at once (default: cores)")->check(in_range(1, 256));
  cmd->add_flag("--exact", a->exact, "Simulate every iteration");
  return {cmd, [a](int, char**) { return run_sweep(*a); }};
}

}  // namespace ep::cli
