#include "traces/chunks_csv.hpp"

#include <climits>
#include <cstdio>
#include <istream>
#include <ostream>

#include "traces/csv.hpp"
#include "traces/io.hpp"

namespace ep::trace {

namespace {
constexpr const char* kHeader = "mode,K,M,replicas,iteration_s,samples_per_s,fits_memory,chosen";
}  // namespace

void write_chunks_csv(const std::vector<ChunkCsvRow>& rows, std::ostream& out, const std::string& path) {
  out << kHeader << '\n';
  char line[256];
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const ChunkCsvRow& c = rows[r];
    const std::string where = "writing " + path + ": row " + std::to_string(r) + ": mode";
    if (c.mode.empty()) throw Error(where + " is empty");
    csv::check_cell(c.mode, where);
    std::snprintf(line, sizeof line, "%s,%d,%d,%d,%.17g,%.17g,%d,%d\n", c.mode.c_str(), c.K, c.M, c.replicas,
                  c.iteration_s, c.samples_per_s, c.fits_memory ? 1 : 0, c.chosen ? 1 : 0);
    out << line;
  }
}

std::vector<ChunkCsvRow> read_chunks_csv(std::istream& in, const std::string& path) {
  std::string line;
  if (!std::getline(in, line)) throw Error(path + ":1: empty file, expected the header " + std::string(kHeader));
  if (line != kHeader) throw Error(path + ":1: expected the header " + std::string(kHeader) + ", found '" + line + "'");
  std::vector<ChunkCsvRow> rows;
  for (int n = 2; std::getline(in, line); ++n) {
    const std::string where = path + ":" + std::to_string(n);
    const std::vector<std::string> c = csv::cells(line);
    if (c.size() != 8) throw Error(where + ": expected 8 cells, found " + std::to_string(c.size()));
    const auto at = [&](int col) { return where + ":" + std::to_string(col); };
    ChunkCsvRow r;
    if (c[0].empty()) throw Error(at(1) + ": empty mode");
    r.mode = c[0];
    r.K = csv::integer(c[1], at(2), 1, INT_MAX);
    r.M = csv::integer(c[2], at(3), 1, INT_MAX);
    r.replicas = csv::integer(c[3], at(4), 1, INT_MAX);
    r.iteration_s = csv::number(c[4], at(5));
    r.samples_per_s = csv::number(c[5], at(6));
    r.fits_memory = csv::flag(c[6], at(7));
    r.chosen = csv::flag(c[7], at(8));
    rows.push_back(std::move(r));
  }
  return rows;
}

std::vector<ChunkCsvRow> read_chunks_csv(const std::string& path) {
  InputFile file(path, {"chunks.csv", detail::kPerRunBytes, detail::kPerRunWhy});
  return read_chunks_csv(file.stream(), path);
}

}  // namespace ep::trace
