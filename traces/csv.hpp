// Inside traces/: what the CSV readers share (cells of a line, whole-cell
// numbers). Files are written without quoting, so a cell never holds a
// comma, quote or line break, and a reader splits at every comma.
#pragma once

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "planner/error.hpp"

namespace ep::trace::csv {

inline std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> out;
  std::size_t begin = 0;
  for (;;) {
    const std::size_t comma = line.find(',', begin);
    out.push_back(line.substr(begin, comma - begin));
    if (comma == std::string::npos) return out;
    begin = comma + 1;
  }
}

// Refuses text a cell cannot hold.
inline void check_cell(const std::string& text, const std::string& where) {
  if (text.find_first_of(",\"\r\n") != std::string::npos)
    throw Error(where + ": '" + text + "' holds a comma, quote or line break");
}

// The whole cell as a finite double.
inline double number(const std::string& text, const std::string& where) {
  errno = 0;
  char* end = nullptr;
  const double v = text.empty() ? 0 : std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE || !std::isfinite(v))
    throw Error(where + ": expected a finite number, found '" + text + "'");
  return v;
}

// The whole cell as an integer in [lo, hi].
inline int integer(const std::string& text, const std::string& where, int lo, int hi) {
  int v = 0;
  const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || p != text.data() + text.size() || v < lo || v > hi)
    throw Error(where + ": expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], found '" +
                text + "'");
  return v;
}

// "0" or "1".
inline bool flag(const std::string& text, const std::string& where) {
  if (text != "0" && text != "1") throw Error(where + ": expected 0 or 1, found '" + text + "'");
  return text == "1";
}

}  // namespace ep::trace::csv
