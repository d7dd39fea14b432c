// chunks.csv: the simulated chunk search of `elasticpipe simulate`, one row
// per (mode, K, M) candidate:
//   mode,K,M,replicas,iteration_s,samples_per_s,fits_memory,chosen
// Times and throughputs with 17 significant digits (they read back exact).
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace ep::trace {

struct ChunkCsvRow {
  std::string mode;  // baseline, freeze, autopipe, autodp, autocache
  int K = 0;
  int M = 0;
  int replicas = 0;
  double iteration_s = 0;
  double samples_per_s = 0;
  bool fits_memory = true;
  bool chosen = false;  // the M the search kept for this K
  friend bool operator==(const ChunkCsvRow&, const ChunkCsvRow&) = default;
};

// Throws ep::Error naming `path` and the row for a mode that a cell cannot
// hold (empty, comma, quote, line break).
void write_chunks_csv(const std::vector<ChunkCsvRow>&, std::ostream&, const std::string& path);

// Strict: the exact header, eight cells per row, K, M and replicas >= 1,
// finite times, 0 or 1 flags. Errors name path:line:column.
[[nodiscard]] std::vector<ChunkCsvRow> read_chunks_csv(std::istream&, const std::string& path);
[[nodiscard]] std::vector<ChunkCsvRow> read_chunks_csv(const std::string& path);

}  // namespace ep::trace
