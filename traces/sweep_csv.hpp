// sweep.csv: one row per point of `elasticpipe sweep`, the swept keys'
// values, then per mode its total simulated time and speedup:
//   KEY1,...,KEYn,MODE1_total_s,MODE1_speedup,...
// Numbers as C++ streams print them by default (6 significant digits); a
// value holding a comma or a quote (a list, `[1,2]`) is quoted (RFC 4180).
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace ep::trace {

struct SweepRow {
  std::vector<std::string> values;  // one per key, as given on the command line
  std::vector<double> total_s;      // one per mode
  std::vector<double> speedup;      // one per mode
};

struct SweepTable {
  std::vector<std::string> keys;   // the swept config keys
  std::vector<std::string> modes;  // mode names
  std::vector<SweepRow> rows;
};

// Throws ep::Error (naming `path`, the row and the cell) for a row whose
// sizes do not match the keys and modes, a key holding a comma, quote or
// line break, or a value holding a line break.
void write_sweep_csv(const SweepTable&, std::ostream&, const std::string& path);

// Strict: the header must be keys then MODE_total_s,MODE_speedup pairs
// (at least one mode), every row as many cells, every number finite.
// Errors name path:line:column (columns count cells from 1).
[[nodiscard]] SweepTable read_sweep_csv(std::istream&, const std::string& path);
[[nodiscard]] SweepTable read_sweep_csv(const std::string& path);

}  // namespace ep::trace
