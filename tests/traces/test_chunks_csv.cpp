// chunks.csv: the bytes `elasticpipe simulate` writes, exact round trips
// over random rows, and the strict reader's errors (file:line:column).
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <sstream>

#include "planner/error.hpp"
#include "traces/chunks_csv.hpp"

using namespace ep;
using Catch::Matchers::Contains;

namespace {

std::string text(const std::vector<trace::ChunkCsvRow>& rows) {
  std::ostringstream out;
  trace::write_chunks_csv(rows, out, "chunks.csv");
  return out.str();
}

std::vector<trace::ChunkCsvRow> read(const std::string& s) {
  std::istringstream in(s);
  return trace::read_chunks_csv(in, "chunks.csv");
}

}  // namespace

TEST_CASE("chunks.csv: header, one row per candidate, 17 significant digits", "[chunks_csv]") {
  const std::vector<trace::ChunkCsvRow> rows = {{"autocache", 2, 4, 8, 0.1, 2560.5, true, false},
                                                {"autocache", 2, 8, 8, 0.25, 1024, false, true}};
  CHECK(text(rows) ==
        "mode,K,M,replicas,iteration_s,samples_per_s,fits_memory,chosen\n"
        "autocache,2,4,8,0.10000000000000001,2560.5,1,0\n"
        "autocache,2,8,8,0.25,1024,0,1\n");
  CHECK(read(text(rows)) == rows);
  CHECK(read(text({})).empty());
}

TEST_CASE("chunks.csv: random rows read back exactly and rewrite to the same bytes", "[chunks_csv]") {
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<int> small(1, 1 << 20);
  std::uniform_real_distribution<double> unit(0, 1);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<trace::ChunkCsvRow> rows;
    for (int r = 0; r < trial % 7; ++r)
      rows.push_back({r % 2 ? "baseline" : "autodp", small(rng), small(rng), small(rng),
                      unit(rng) * std::pow(10.0, small(rng) % 40 - 20), unit(rng) * 1e6, r % 3 != 0, r % 2 == 0});
    const std::string bytes = text(rows);
    CHECK(read(bytes) == rows);
    CHECK(text(read(bytes)) == bytes);
  }
}

TEST_CASE("chunks.csv: malformed files name the line and column", "[chunks_csv]") {
  const std::string header = "mode,K,M,replicas,iteration_s,samples_per_s,fits_memory,chosen\n";
  CHECK_THROWS_WITH(read(""), Contains("chunks.csv:1: empty file"));
  CHECK_THROWS_WITH(read("mode,K,M\n"), Contains("chunks.csv:1: expected the header"));
  CHECK_THROWS_WITH(read(header + "a,1,2,3,0.1,5,1\n"), Contains("chunks.csv:2: expected 8 cells, found 7"));
  CHECK_THROWS_WITH(read(header + ",1,2,3,0.1,5,1,0\n"), Contains("chunks.csv:2:1: empty mode"));
  CHECK_THROWS_WITH(read(header + "a,0,2,3,0.1,5,1,0\n"), Contains("chunks.csv:2:2: expected an integer in [1,"));
  CHECK_THROWS_WITH(read(header + "a,1,2x,3,0.1,5,1,0\n"), Contains("chunks.csv:2:3:"));
  CHECK_THROWS_WITH(read(header + "a,1,2,3,nan,5,1,0\n"), Contains("chunks.csv:2:5: expected a finite number"));
  CHECK_THROWS_WITH(read(header + "a,1,2,3,0.1,5,2,0\n"), Contains("chunks.csv:2:7: expected 0 or 1"));
  CHECK_THROWS_WITH(read(header + "a,1,2,3,0.1,5,1,0\nb,1,2,3,0.1,5,1,yes\n"), Contains("chunks.csv:3:8:"));
  CHECK_THROWS_WITH(text({{"a,b", 1, 1, 1, 0, 0, true, false}}), Contains("holds a comma"));
  CHECK_THROWS_WITH(text({{"", 1, 1, 1, 0, 0, true, false}}), Contains("mode is empty"));
}
