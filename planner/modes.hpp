// The speedup breakdown's ablation modes (SPEC §7), each adding one piece
// of the method, as configs: a back end runs a mode by running its config.
#pragma once

#include <string>
#include <vector>

#include "planner/config.hpp"

namespace ep {

enum class Mode { Baseline, Freeze, AutoPipe, AutoDP, AutoCache };
inline constexpr Mode kAllModes[] = {Mode::Baseline, Mode::Freeze, Mode::AutoPipe, Mode::AutoDP, Mode::AutoCache};

[[nodiscard]] std::string to_string(Mode);
[[nodiscard]] Mode parse_mode(const std::string&);  // throws ep::Error
// A comma-separated list ("baseline,autocache", "all", "all,freeze"): each
// mode once, in kAllModes order, so the baseline comes first and speedups
// are over it. An empty list or entry is refused (ep::Error naming it).
[[nodiscard]] std::vector<Mode> parse_modes(const std::string&);

// The config a mode runs: baseline = no freezing, K = K0 throughout;
// freeze = freezing only (frozen layers lose their backward, nothing moves);
// autopipe = + repartition and a shorter pipeline (the objective decides
// which); autodp = + replicas on the freed GPUs; autocache = + the
// activation cache (the config's policy, "auto" when the config says
// "off"). The cache is off in every mode but the last.
[[nodiscard]] Config mode_config(const Config&, Mode);

}  // namespace ep
