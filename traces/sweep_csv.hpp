// sweep.csv: one row per point of `elasticpipe sweep`, the swept keys'
// values, then per mode its total simulated time, its speedup over the
// reference (empty where the reference does not fit), whether every plan
// fits (0/1), its largest global batch and its updates:
//   KEY1,...,KEYn,MODE1_total_s,MODE1_speedup,MODE1_fits,MODE1_global_batch,MODE1_updates,...
// Numbers as C++ streams print them by default (6 significant digits); a
// value holding a comma or a quote (a list, `[1,2]`) is quoted (RFC 4180).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace ep::trace {

struct SweepCell {
  double total_s = 0;
  std::optional<double> speedup;  // none: the reference does not fit
  bool fits_memory = true;
  std::int64_t global_batch = 0;  // the largest of the run
  std::int64_t updates = 0;
  friend bool operator==(const SweepCell&, const SweepCell&) = default;
};

struct SweepRow {
  std::vector<std::string> values;  // one per key, as given on the command line
  std::vector<SweepCell> modes;     // one per mode
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

// Strict: the header must be keys then each mode's five columns (at least
// one mode), every row as many cells, every number finite. Errors name
// path:line:column (columns count cells from 1).
[[nodiscard]] SweepTable read_sweep_csv(std::istream&, const std::string& path);
[[nodiscard]] SweepTable read_sweep_csv(const std::string& path);

}  // namespace ep::trace
