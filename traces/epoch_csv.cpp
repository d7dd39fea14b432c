// Per-epoch metrics CSV (traces/SCHEMA.md, "Per-epoch metrics").
#include <algorithm>
#include <charconv>
#include <iterator>

#include "traces/epoch_columns.hpp"
#include "traces/csv.hpp"
#include "traces/io.hpp"

namespace ep::trace {
namespace {

using namespace detail;

std::vector<std::string> column_names() {
  std::vector<std::string> names;
  const EpochMetrics m;
  visit_columns(m, [&](const char* name, const auto&) { names.emplace_back(name); });
  return names;
}

std::string join(const std::vector<std::string>& fields) {
  std::string s;
  for (std::size_t i = 0; i < fields.size(); ++i) s += (i ? "," : "") + fields[i];
  return s;
}

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> fields(1);
  for (const char c : line) {
    if (c == ',')
      fields.emplace_back();
    else
      fields.back() += c;
  }
  return fields;
}

std::string format(const std::string& s) { return s; }
std::string format(bool b) { return b ? "1" : "0"; }
std::string format(int i) { return std::to_string(i); }
std::string format(double d) { return csv::shortest(d); }

// Parse a whole field; false when it is not entirely a T.
template <class T>
bool parse_number(const std::string& s, T& v) {
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}

bool parse(const std::string& s, std::string& v) {
  v = s;
  return true;
}
bool parse(const std::string& s, bool& v) {
  v = s == "1";
  return s == "0" || s == "1";
}
bool parse(const std::string& s, int& v) { return parse_number(s, v); }
bool parse(const std::string& s, double& v) { return parse_number(s, v); }

const char* expected(const std::string&) { return "text"; }
const char* expected(bool) { return "0 or 1"; }
const char* expected(int) { return "an integer"; }
const char* expected(double) { return "a number"; }

}  // namespace

void write_epoch_csv(const std::vector<EpochMetrics>& rows, std::ostream& out, const std::string& path) {
  std::string text = join(column_names()) + "\n";
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const std::string where = "writing " + path + ": row " + std::to_string(r);
    check_source(rows[r].source, where);
    std::vector<std::string> fields;
    visit_columns(rows[r], [&](const char* name, const auto& v) {
      fields.push_back(format(v));
      csv::check_cell(fields.back(), where + ": column '" + name + "'");
    });
    text += join(fields) + "\n";
  }
  out << text;
}

void write_epoch_csv(const std::vector<EpochMetrics>& rows, const std::string& path) {
  AtomicFile file(path);
  write_epoch_csv(rows, file.stream(), path);
  file.commit();
}

std::vector<EpochMetrics> read_epoch_csv(const std::string& path) {
  InputFile file(path, {"epochs.csv", kPerRunBytes, kPerRunWhy});
  std::istream& in = file.stream();
  const std::vector<std::string> names = column_names();
  std::string line;
  if (!std::getline(in, line)) throw Error(path + ":1: empty file, expected the header " + join(names));
  const std::vector<std::string> header = split(line);
  // A file written before the later columns: without them, in order.
  std::vector<std::string> earlier;
  std::copy_if(names.begin(), names.end(), std::back_inserter(earlier), [](const std::string& n) { return !is_later_column(n); });
  const bool old = header == earlier;
  if (header != names && !old) {
    const auto missing = [](const auto& from, const auto& within) {  // first of from not within
      return std::find_if(from.begin(), from.end(), [&](const auto& n) {
        return std::find(within.begin(), within.end(), n) == within.end();
      });
    };
    std::string why = "columns out of order";
    if (const auto it = missing(names, header); it != names.end())
      why = "missing column '" + *it + "'";
    else if (const auto extra = missing(header, names); extra != header.end())
      why = "unexpected column '" + *extra + "'";
    throw Error(path + ":1: header: " + why + "; expected " + join(names));
  }
  std::vector<EpochMetrics> rows;
  for (int line_no = 2; std::getline(in, line); ++line_no) {
    const std::string where = path + ":" + std::to_string(line_no);
    const std::vector<std::string> fields = split(line);
    if (fields.size() != header.size())
      throw Error(where + ": expected " + std::to_string(header.size()) + " fields, found " +
                  std::to_string(fields.size()));
    EpochMetrics m;
    std::size_t c = 0;
    visit_columns(m, [&](const char* name, auto& v) {
      if (old && is_later_column(name)) return;
      if (!parse(fields[c], v))
        throw Error(where + ": column '" + name + "': expected " + expected(v) + ", found '" + fields[c] +
                    "'");
      ++c;
    });
    check_source(m.source, where);
    if (!valid_layer_list(m.frozen_inside))
      throw Error(where + ": column 'frozen_inside': expected '-' or ascending layers like '4 7', found '" +
                  m.frozen_inside + "'");
    rows.push_back(std::move(m));
  }
  return rows;
}

}  // namespace ep::trace
