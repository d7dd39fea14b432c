#include "traces/sweep_csv.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <istream>
#include <ostream>
#include <sstream>

#include "traces/csv.hpp"
#include "traces/io.hpp"

namespace ep::trace {

namespace {

constexpr const char* kTotal = "_total_s";
constexpr const char* kSpeedup = "_speedup";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

using csv::cells;
using csv::check_cell;
using csv::number;

}  // namespace

void write_sweep_csv(const SweepTable& t, std::ostream& out, const std::string& path) {
  std::ostringstream csv;
  for (const std::string& k : t.keys) {
    check_cell(k, "writing " + path + ": key");
    csv << k << ",";
  }
  for (std::size_t m = 0; m < t.modes.size(); ++m) {
    check_cell(t.modes[m], "writing " + path + ": mode");
    csv << t.modes[m] << kTotal << "," << t.modes[m] << kSpeedup << (m + 1 < t.modes.size() ? "," : "\n");
  }
  for (std::size_t r = 0; r < t.rows.size(); ++r) {
    const SweepRow& row = t.rows[r];
    const std::string where = "writing " + path + ": row " + std::to_string(r + 1);
    if (row.values.size() != t.keys.size() || row.total_s.size() != t.modes.size() ||
        row.speedup.size() != t.modes.size())
      throw Error(where + ": " + std::to_string(row.values.size()) + " values and " +
                  std::to_string(row.total_s.size()) + " modes, expected " + std::to_string(t.keys.size()) +
                  " and " + std::to_string(t.modes.size()));
    for (std::size_t k = 0; k < row.values.size(); ++k)
      csv << csv::quoted_cell(row.values[k], where + ", column " + std::to_string(k + 1)) << ",";
    for (std::size_t m = 0; m < t.modes.size(); ++m)
      csv << row.total_s[m] << "," << row.speedup[m] << (m + 1 < t.modes.size() ? "," : "\n");
  }
  out << csv.str();
}

SweepTable read_sweep_csv(std::istream& in, const std::string& path) {
  SweepTable t;
  std::string line;
  if (!std::getline(in, line)) throw Error(path + ":1: empty file, expected the header KEY,...,MODE_total_s,MODE_speedup");
  const std::vector<std::string> header = cells(line);
  std::size_t c = 0;
  for (; c < header.size() && !ends_with(header[c], kTotal); ++c) {
    if (header[c].empty()) throw Error(path + ":1:" + std::to_string(c + 1) + ": empty key name");
    t.keys.push_back(header[c]);
  }
  if (c == header.size()) throw Error(path + ":1: header: no MODE_total_s column");
  for (; c < header.size(); c += 2) {
    const std::string where = path + ":1:" + std::to_string(c + 1);
    if (!ends_with(header[c], kTotal)) throw Error(where + ": expected MODE_total_s, found '" + header[c] + "'");
    const std::string mode = header[c].substr(0, header[c].size() - std::string(kTotal).size());
    if (c + 1 == header.size() || header[c + 1] != mode + kSpeedup)
      throw Error(path + ":1:" + std::to_string(c + 2) + ": expected " + mode + kSpeedup + ", found '" +
                  (c + 1 < header.size() ? header[c + 1] : std::string()) + "'");
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
    for (; k < row.size(); k += 2) {
      r.total_s.push_back(number(row[k], where + ":" + std::to_string(k + 1)));
      r.speedup.push_back(number(row[k + 1], where + ":" + std::to_string(k + 2)));
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
