// `--set KEY=VALUE`, applied to a parsed config document before it is read
// (internal to the config loader: toml++ is the planner's own dependency).
#pragma once

#include <toml++/toml.h>

#include <set>
#include <string>

#include "planner/config.hpp"

namespace ep {

// Applies each override in order and returns the keys set. Each is one
// value (no line break), KEY is section.key, and no key is set twice or
// both as a table and inside it: which value won would go unsaid.
std::set<std::string> apply_overrides(toml::table& root, const Overrides& overrides);

}  // namespace ep
