// Inside traces/: what the CSV readers share (cells of a line, whole-cell
// numbers). Cells are written as they are, except free text (sweep.csv's
// values, e.g. a list `[1,2]`) which is quoted as RFC 4180 says when it
// holds a comma or a quote; a reader splits at the commas outside quotes.
#pragma once

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "planner/error.hpp"

namespace ep::trace::csv {

// The cells of a line: split at commas outside double quotes; a quoted cell
// loses its quotes, and "" inside one is a quote.
inline std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (c == '"' && quoted && i + 1 < line.size() && line[i + 1] == '"') {
      out.back() += '"';
      ++i;
    } else if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

// Free text as a cell: quoted when it holds a comma or a quote. A line
// break is refused (one row is one line).
inline std::string quoted_cell(const std::string& text, const std::string& where) {
  if (text.find_first_of("\r\n") != std::string::npos)
    throw Error(where + ": '" + printable(text) + "' holds a line break");
  if (text.find_first_of(",\"") == std::string::npos) return text;
  std::string out = "\"";
  for (const char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

// The shortest text that reads back as the same double (epochs.csv's rule).
inline std::string shortest(double d) {
  char buf[32];
  return {buf, std::to_chars(buf, buf + sizeof buf, d).ptr};
}

// Refuses text a cell cannot hold.
inline void check_cell(const std::string& text, const std::string& where) {
  if (text.find_first_of(",\"\r\n") != std::string::npos)
    throw Error(where + ": '" + printable(text) + "' holds a comma, quote or line break");
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
