// The modes `simulate` and `sweep` run, as configs: a back end runs a mode
// by running its config. The reference every speedup is over is the best
// plan without freezing (baseline); the paper's baseline (GPipe at
// planner.K) and the speedup breakdown's modes, each adding one piece of
// the method (SPEC §7), stand beside it; configured is the config as
// `train` runs it.
#pragma once

#include <string>
#include <vector>

#include "planner/config.hpp"

namespace ep {

enum class Mode { Baseline, GPipe, Freeze, AutoPipe, AutoDP, AutoCache, Configured };
inline constexpr Mode kAllModes[] = {Mode::Baseline, Mode::GPipe,     Mode::Freeze,    Mode::AutoPipe,
                                     Mode::AutoDP,   Mode::AutoCache, Mode::Configured};

[[nodiscard]] std::string to_string(Mode);
// What the mode is, for a table's legend ("the best plan without freezing").
[[nodiscard]] std::string describe(Mode);
[[nodiscard]] Mode parse_mode(const std::string&);  // throws ep::Error
// A comma-separated list ("baseline,autocache", "all", "all,freeze"): each
// mode once, in kAllModes order, so the baseline comes first. An empty list
// or entry is refused (ep::Error naming it).
[[nodiscard]] std::vector<Mode> parse_modes(const std::string&);
// The modes a run needs to print speedups over `reference`: `modes` with
// the reference added where it is missing, in kAllModes order.
[[nodiscard]] std::vector<Mode> with_reference(std::vector<Mode> modes, Mode reference);
// --reference: baseline (the best plan without freezing) or gpipe (the
// paper's); throws ep::Error naming the flag otherwise.
[[nodiscard]] Mode parse_reference(const std::string&);

// The config a mode runs:
// - baseline: the best plan without freezing that fits, as a user would run
//   it: no freezing, objective time, K (from planner.K down), partition, M
//   and replicas on every free device (AutoDP's layout) chosen together by
//   predicted time, no cache;
// - gpipe: the paper's baseline: no freezing, K = planner.K and its replicas
//   throughout (the config's schedule and objective for M);
// - freeze = gpipe + freezing (frozen layers lose their backward, nothing
//   moves); autopipe = + repartition and a shorter pipeline (the objective
//   decides which); autodp = + replicas on the freed GPUs; autocache = + the
//   activation cache (the config's policy, "auto" when the config says
//   "off"). The cache is off in every mode but autocache and configured;
// - configured: the config exactly as `train` runs it.
[[nodiscard]] Config mode_config(const Config&, Mode);

}  // namespace ep
