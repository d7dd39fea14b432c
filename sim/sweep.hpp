// The sweep: whole simulated trainings over the cartesian product of
// `--set KEY=V1,V2,...` lists. Points that share a cluster share a SimGrid
// platform: they run in one process (one engine per process) as one
// simulate_trainings call, so a question two points ask SimGrid (the
// baseline of every alpha, the plans two freeze timelines have in common)
// is simulated once. Groups of points run in child processes of the one
// pool (isolate.hpp), `jobs` at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <functional>
#include <string>
#include <vector>

#include "planner/config.hpp"
#include "planner/modes.hpp"

namespace ep::sim {

// Each point is a whole simulated training: a sweep larger than this is a
// mistake or a job for several runs.
inline constexpr std::size_t kMaxSweepPoints = 1000;

// "a=1,2,3" -> {"a=1", "a=2", "a=3"}; commas inside [] (TOML arrays) and
// inside quotes (TOML strings) stay.
// Throws ep::Error without '='.
[[nodiscard]] std::vector<std::string> sweep_values(const std::string& assignment);

// Every combination of one value of each list (each "KEY=V1,V2,..."), the
// first list varying slowest. Throws ep::Error when there would be more
// than kMaxSweepPoints, before building them.
[[nodiscard]] std::vector<Overrides> sweep_points(const std::vector<std::string>& lists);

struct SweepModeResult {
  Mode mode = Mode::Baseline;
  double total_s = 0;
  std::optional<double> speedup;  // over the reference; none where it does not fit
  double samples_per_s = 0;
  bool fits_memory = true;
  std::int64_t global_batch = 0;  // the largest of the run
  std::int64_t updates = 0;
};

struct SweepOptions {
  // Per point; the reference is added where missing (with_reference).
  std::vector<Mode> modes{Mode::Baseline, Mode::Configured};
  Mode reference = Mode::Baseline;
  bool exact = false;
  int jobs = 0;  // simulations at once; 0: one per core
  // Called with the number of points done so far, as groups of points end.
  std::function<void(std::size_t done)> progress;
};

// Simulates every point: configs[i] is the config `points[i]` gives (same
// file, the point's overrides). Points whose cluster.* overrides are equal
// run together. Per point, one result per mode of with_reference(options.modes,
// options.reference), in that order.
// A failure throws ep::Error once the running groups have ended.
[[nodiscard]] std::vector<std::vector<SweepModeResult>> run_sweep(const std::vector<Config>& configs,
                                                                  const std::vector<Overrides>& points,
                                                                  const SweepOptions&);

}  // namespace ep::sim
