// Internal to traces/: the JSON encodings the run state shares with the
// transitions file.
#pragma once

#include <nlohmann/json.hpp>

#include "traces/io.hpp"
#include "traces/run_outputs.hpp"

namespace ep::trace::detail {

[[nodiscard]] nlohmann::json transition_to_json(const TransitionCost& t);
TransitionCost transition_from_json(const json& j, const std::string& where);

}  // namespace ep::trace::detail
