// Expected failures (bad config, bad file, infeasible request) travel as one
// exception type that accumulates context as it propagates and is printed
// once, at the top, as a single `ERROR:` line (exit code 2).
#pragma once

#include <stdexcept>
#include <string>

namespace ep {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}

  // Prepend a context, e.g. "loading configs/x.toml: ".
  [[nodiscard]] Error with_context(const std::string& context) const {
    return Error(context + ": " + what());
  }
};

// Where a config value came from: "file:line:col" or "--set key".
struct SourcePos {
  std::string origin;  // file path, or "--set"
  int line = 0;        // 0 when not known (e.g. command-line override)
  int column = 0;

  [[nodiscard]] std::string to_string() const {
    if (line <= 0) return origin;
    return origin + ":" + std::to_string(line) + ":" + std::to_string(column);
  }
};

// The one message shape for bad input: where, which key, expected, found.
[[nodiscard]] inline Error config_error(const SourcePos& pos, const std::string& key,
                                        const std::string& expected,
                                        const std::string& found) {
  return Error(pos.to_string() + ": key '" + key + "': expected " + expected +
               ", found " + found);
}

}  // namespace ep
