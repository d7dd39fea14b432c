// JSON read from a file (or from a checkpoint's bytes) is parsed here, with
// a bound on its nesting: the parser itself keeps its own stack, but copying,
// comparing or printing a value recurses once per level, and 200,000 nested
// arrays overflow a thread's stack there. No format of ours nests beyond a
// handful of levels.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "planner/error.hpp"

namespace ep {

constexpr int kMaxJsonDepth = 64;

// `input` (text or a stream) as JSON (Json: nlohmann::json or
// ordered_json); `callback` as in Json::parse. Invalid JSON or deeper
// nesting is an ep::Error starting with `where` (the path).
template <class Json = nlohmann::json, class Input>
Json parse_json(Input&& input, const std::string& where, const typename Json::parser_callback_t& callback = nullptr) {
  const auto bounded = [&](int depth, typename Json::parse_event_t event, Json& parsed) {
    if (depth > kMaxJsonDepth)
      throw Error(where + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
                  " levels (no file of ours nests beyond a few)");
    return callback ? callback(depth, event, parsed) : true;
  };
  try {
    return Json::parse(std::forward<Input>(input), bounded);
  } catch (const typename Json::parse_error& e) {
    throw Error(where + ": not valid JSON at byte " + std::to_string(e.byte) + ": " + e.what());
  }
}

}  // namespace ep
