// Named clusters a config starts from (`cluster.preset`): a node type with
// its devices, links and host, so that configs name hardware instead of
// copying its numbers. Keys the config gives override the preset's; the
// node count is always the config's. docs/CONFIG.md lists them with
// their sources.
#pragma once

#include <string>

#include "planner/config.hpp"

namespace ep {

// nullptr for an unknown name.
[[nodiscard]] const ClusterSpec* find_cluster_preset(const std::string& name);
[[nodiscard]] std::string cluster_preset_names();  // "a|b|c"

}  // namespace ep
