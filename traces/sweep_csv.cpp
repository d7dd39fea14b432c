#include "traces/sweep_csv.hpp"

#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <istream>
#include <limits>
#include <ostream>
#include <sstream>

#include "traces/csv.hpp"
#include "traces/io.hpp"

namespace ep::trace {

namespace {

// A mode's columns, in order: its name, then each suffix.
constexpr std::array<const char*, 5> kColumns{"_total_s", "_speedup", "_fits", "_global_batch", "_updates"};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::int64_t count(const std::string& text, const std::string& where) {
  std::int64_t v = 0;
  const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || p != text.data() + text.size() || v < 0)
    throw Error(where + ": expected a count (an integer >= 0), found '" + text + "'");
  return v;
}

using csv::cells;
using csv::check_cell;
using csv::number;

}  // namespace

void write_sweep_csv(const SweepTable& t, std::ostream& out, const std::string& path) {
  std::ostringstream csv;
  std::string header;
  for (const std::string& k : t.keys) {
    check_cell(k, "writing " + path + ": key");
    header += k + ",";
  }
  for (const std::string& m : t.modes) {
    check_cell(m, "writing " + path + ": mode");
    for (const char* c : kColumns) header += m + c + ",";
  }
  header.back() = '\n';
  csv << header;
  for (std::size_t r = 0; r < t.rows.size(); ++r) {
    const SweepRow& row = t.rows[r];
    const std::string where = "writing " + path + ": row " + std::to_string(r + 1);
    if (row.values.size() != t.keys.size() || row.modes.size() != t.modes.size())
      throw Error(where + ": " + std::to_string(row.values.size()) + " values and " + std::to_string(row.modes.size()) +
                  " modes, expected " + std::to_string(t.keys.size()) + " and " + std::to_string(t.modes.size()));
    std::ostringstream line;
    for (std::size_t k = 0; k < row.values.size(); ++k)
      line << csv::quoted_cell(row.values[k], where + ", column " + std::to_string(k + 1)) << ",";
    for (const SweepCell& m : row.modes) {
      line << m.total_s << ",";
      if (m.speedup) line << *m.speedup;
      line << "," << (m.fits_memory ? 1 : 0) << "," << m.global_batch << "," << m.updates << ",";
    }
    std::string text = line.str();
    text.back() = '\n';
    csv << text;
  }
  out << csv.str();
}

SweepTable read_sweep_csv(std::istream& in, const std::string& path) {
  SweepTable t;
  std::string line;
  if (!std::getline(in, line))
    throw Error(path + ":1: empty file, expected the header KEY,...,MODE_total_s,MODE_speedup,...");
  const std::vector<std::string> header = cells(line);
  std::size_t c = 0;
  for (; c < header.size() && !ends_with(header[c], kColumns[0]); ++c) {
    if (header[c].empty()) throw Error(path + ":1:" + std::to_string(c + 1) + ": empty key name");
    t.keys.push_back(header[c]);
  }
  if (c == header.size()) throw Error(path + ":1: header: no MODE_total_s column");
  for (; c < header.size(); c += kColumns.size()) {
    const std::string mode = header[c].substr(0, header[c].size() - std::string(kColumns[0]).size());
    for (std::size_t k = 0; k < kColumns.size(); ++k) {
      const std::string want = mode + kColumns[k];
      const std::string found = c + k < header.size() ? header[c + k] : std::string();
      if (found != want)
        throw Error(path + ":1:" + std::to_string(c + k + 1) + ": expected " + want + ", found '" + found + "'");
    }
    t.modes.push_back(mode);
  }
  for (int line_no = 2; std::getline(in, line); ++line_no) {
    const std::string where = path + ":" + std::to_string(line_no);
    const std::vector<std::string> row = cells(line);
    if (row.size() != header.size())
      throw Error(where + ": expected " + std::to_string(header.size()) + " cells, found " +
                  std::to_string(row.size()));
    SweepRow r;
    std::size_t k = 0;
    for (; k < t.keys.size(); ++k) {
      if (row[k].empty()) throw Error(where + ":" + std::to_string(k + 1) + ": empty value of " + t.keys[k]);
      r.values.push_back(row[k]);
    }
    for (; k < row.size(); k += kColumns.size()) {
      const auto at = [&](std::size_t i) { return where + ":" + std::to_string(k + i + 1); };
      SweepCell m;
      m.total_s = number(row[k], at(0));
      if (!row[k + 1].empty()) m.speedup = number(row[k + 1], at(1));
      m.fits_memory = csv::flag(row[k + 2], at(2));
      m.global_batch = count(row[k + 3], at(3));
      m.updates = count(row[k + 4], at(4));
      r.modes.push_back(m);
    }
    t.rows.push_back(std::move(r));
  }
  return t;
}

SweepTable read_sweep_csv(const std::string& path) {
  InputFile file(path, {"sweep.csv", detail::kPerRunBytes, detail::kPerRunWhy});
  return read_sweep_csv(file.stream(), path);
}

}  // namespace ep::trace
