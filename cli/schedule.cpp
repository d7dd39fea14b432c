// elasticpipe schedule: one pipeline schedule as a timeline under unit
// costs, or lowered to CSV.
#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "planner/config.hpp"
#include "planner/schedule.hpp"
#include "planner/timeline.hpp"

namespace ep::cli {

namespace {
// Optional arguments given, even empty, are read (an empty one is refused
// there), not taken for absent.
struct ScheduleArgs {
  std::optional<std::string> config;
  std::vector<std::string> overrides;
  int K = 0;
  int M = 0;
  std::optional<std::string> kind;
  int v = 0;
  bool csv = false;
};

// The config's names, and "looping" for looping_bf.
ScheduleKind parse_kind(const std::string& s) {
  if (const auto k = parse_schedule_kind(s == "looping" ? "looping_bf" : s)) return *k;
  throw Error("--kind: expected gpipe|1f1b|looping|looping_bf|looping_df, found '" + printable(s) + "'");
}

// Four actions or more per device, micro-batch and chunk, each a few dozen
// bytes, plus the timeline's text: a million keeps it to about a second and
// a few hundred MB.
constexpr std::int64_t kMaxChunkPasses = 1'000'000;

int run_schedule(const ScheduleArgs& a) {
  ScheduleOptions o;
  o.kind = ScheduleKind::GPipe;
  o.v = 1;
  if (a.config) {  // defaults from the config's planner section
    const Config config = load_checked_config(*a.config, a.overrides);
    o.kind = config.planner.schedule;
    o.v = config.planner.virtual_stages;
  } else if (!a.overrides.empty()) {
    throw Error("--set needs a CONFIG");
  }
  if (a.kind) o.kind = parse_kind(*a.kind);
  const bool looping = o.kind == ScheduleKind::LoopingBreadthFirst || o.kind == ScheduleKind::LoopingDepthFirst;
  if (a.v > 0)
    o.v = a.v;
  else if (looping && o.v == 1 && !a.config)
    o.v = 2;
  o.K = a.K;
  o.M = a.M;
  const std::int64_t passes = static_cast<std::int64_t>(o.K) * o.M * o.v;
  if (passes > kMaxChunkPasses)
    throw Error("--K " + std::to_string(o.K) + " --M " + std::to_string(o.M) + " --v " + std::to_string(o.v) +
                ": K x M x v = " + std::to_string(passes) + " chunk passes, expected at most " +
                std::to_string(kMaxChunkPasses) +
                " (the schedule and its timeline grow with it: gigabytes and minutes beyond)");
  const Schedule schedule = build_schedule(o);
  check_schedule(schedule);
  if (a.csv) {
    std::cout << to_csv(schedule);
    return 0;
  }
  // Unit costs: a device's forward of one micro-batch takes 1, its backward 2.
  const Timeline t = simulate(schedule, unit_cost(1.0, 2.0, o.v));
  std::cout << to_string(o.kind) << " K=" << o.K << " M=" << o.M << " v=" << o.v
            << " (unit costs: F = 1/v, B = 2/v per chunk; transfers free)\n"
            << render_timeline(t, schedule) << "makespan " << t.makespan << ", bubble fraction "
            << t.bubble_fraction() << "\n";
  return 0;
}
}  // namespace

Command add_schedule(CLI::App& app) {
  auto a = std::make_shared<ScheduleArgs>();
  auto* cmd = app.add_subcommand("schedule", "Print one pipeline schedule as a timeline under unit costs");
  cmd->add_option("config", a->config, "TOML config (optional: schedule kind and v defaults)");
  cmd->add_option("--set", a->overrides, "Override a config key")->take_all();
  cmd->add_option("--K", a->K, "Pipeline length (devices)")->required()->check(in_range(1, 1024));
  cmd->add_option("--M", a->M, "Micro-batches")->required()->check(in_range(1, 100000));
  cmd->add_option("--kind", a->kind, "gpipe|1f1b|looping|looping_bf|looping_df");
  cmd->add_option("--v", a->v, "Chunks per device (looping)")->check(in_range(1, 64));
  cmd->add_flag("--csv", a->csv, "Print the lowered schedule as CSV instead");
  return {cmd, [a](int, char**) { return run_schedule(*a); }};
}

}  // namespace ep::cli
