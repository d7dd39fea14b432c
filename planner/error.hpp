// Expected failures (bad config, bad file, infeasible request) travel as one
// exception type that accumulates context as it propagates and is printed
// once, at the top, as a single `ERROR:` line (exit code 2).
#pragma once

#include <cstddef>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ep {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}

  // Prepend a context, e.g. "loading configs/x.toml: ".
  [[nodiscard]] Error with_context(const std::string& context) const {
    return Error(context + ": " + what());
  }
};

// `text` (a file's bytes, an argument) as a message may show it: control
// characters and bytes that are not UTF-8 as \xNN, cut to about `max`
// characters with "...", so that an error stays one readable line.
[[nodiscard]] inline std::string printable(std::string_view text, std::size_t max = 80) {
  std::string out;
  std::size_t i = 0;
  while (i < text.size() && out.size() < max) {
    const auto c = static_cast<unsigned char>(text[i]);
    // The length of the UTF-8 sequence starting here; 0 when it is not one.
    std::size_t n = c >= 0x20 && c < 0x7f ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
                    : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    for (std::size_t k = 1; k < n; ++k)
      if (i + k >= text.size() || (static_cast<unsigned char>(text[i + k]) & 0xc0) != 0x80) n = 0;
    if (n > 0) {
      out.append(text.substr(i, n));
      i += n;
      continue;
    }
    char hex[8];
    std::snprintf(hex, sizeof hex, "\\x%02x", c);
    out += hex;
    ++i;
  }
  return i < text.size() ? out + "..." : out;
}

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
