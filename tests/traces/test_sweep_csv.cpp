// sweep.csv: the bytes `elasticpipe sweep` writes, a round trip, and the
// strict reader's errors (file:line:column).
#include <catch2/catch.hpp>

#include <sstream>

#include "planner/error.hpp"
#include "traces/sweep_csv.hpp"

using namespace ep;
using Catch::Matchers::Contains;

namespace {

trace::SweepTable table() {
  trace::SweepTable t;
  t.keys = {"planner.alpha", "cluster.inter_node.bandwidth_bytes_per_s"};
  t.modes = {"baseline", "autocache"};
  t.rows.push_back({{"0.1", "1e9"}, {{33329.98765, 1, true, 800, 16020}, {16793.5123, 1.98467321, false, 800, 16020}}});
  t.rows.push_back({{"0.5", "12.5e9"}, {{30624.7, std::nullopt, false, 800, 16020}, {7798.7, std::nullopt, true, 6400, 6010}}});
  return t;
}

std::string text(const trace::SweepTable& t) {
  std::ostringstream out;
  trace::write_sweep_csv(t, out, "sweep.csv");
  return out.str();
}

trace::SweepTable read(const std::string& s) {
  std::istringstream in(s);
  return trace::read_sweep_csv(in, "sweep.csv");
}

}  // namespace

TEST_CASE("sweep.csv: keys, then per mode total, speedup, fits, global batch, updates, 6 significant digits",
          "[sweep_csv]") {
  CHECK(text(table()) ==
        "planner.alpha,cluster.inter_node.bandwidth_bytes_per_s,baseline_total_s,baseline_speedup,baseline_fits,"
        "baseline_global_batch,baseline_updates,autocache_total_s,autocache_speedup,autocache_fits,"
        "autocache_global_batch,autocache_updates\n"
        "0.1,1e9,33330,1,1,800,16020,16793.5,1.98467,0,800,16020\n"
        "0.5,12.5e9,30624.7,,0,800,16020,7798.7,,1,6400,6010\n");
}

TEST_CASE("sweep.csv: what is written reads back", "[sweep_csv]") {
  const trace::SweepTable t = table();
  const trace::SweepTable back = read(text(t));
  CHECK(back.keys == t.keys);
  CHECK(back.modes == t.modes);
  REQUIRE(back.rows.size() == 2);
  CHECK(back.rows[1].values == t.rows[1].values);
  CHECK(back.rows[1].modes[0].total_s == 30624.7);
  CHECK(back.rows[1].modes[1] == trace::SweepCell{7798.7, std::nullopt, true, 6400, 6010});
  CHECK(back.rows[0].modes[1].speedup == 1.98467);  // as printed
  CHECK_FALSE(back.rows[0].modes[1].fits_memory);
  CHECK(text(back) == text(t));
  trace::SweepTable no_keys;
  no_keys.modes = {"baseline"};
  no_keys.rows.push_back({{}, {{5, 1, true, 64, 10}}});
  CHECK(text(no_keys) ==
        "baseline_total_s,baseline_speedup,baseline_fits,baseline_global_batch,baseline_updates\n5,1,1,64,10\n");
  CHECK(read(text(no_keys)).rows.size() == 1);
}

TEST_CASE("sweep.csv: a value with a comma or a quote is quoted and reads back", "[sweep_csv]") {
  trace::SweepTable t = table();
  t.keys[0] = "data.classes";
  t.rows[0].values[0] = "[1,2]";
  t.rows[1].values[0] = "say \"hi\"";
  const std::string written = text(t);
  CHECK(written.find("\n\"[1,2]\",1e9,") != std::string::npos);
  CHECK(written.find("\n\"say \"\"hi\"\"\",12.5e9,") != std::string::npos);
  const trace::SweepTable back = read(written);
  CHECK(back.rows[0].values == t.rows[0].values);
  CHECK(back.rows[1].values == t.rows[1].values);
  CHECK(text(back) == written);
}

TEST_CASE("sweep.csv: the writer refuses cells that would break the file", "[sweep_csv]") {
  trace::SweepTable t = table();
  t.rows[1].values[0] = "two\nlines";
  CHECK_THROWS_WITH(text(t), Contains("sweep.csv: row 2, column 1") && Contains("line break"));
  t = table();
  t.keys[0] = "a,b";
  CHECK_THROWS_WITH(text(t), Contains("sweep.csv: key") && Contains("comma"));
  t = table();
  t.rows[0].modes.pop_back();
  CHECK_THROWS_WITH(text(t), Contains("row 1"));
}

TEST_CASE("sweep.csv: the reader names file, line and column", "[sweep_csv]") {
  const std::string header =
      "planner.alpha,baseline_total_s,baseline_speedup,baseline_fits,baseline_global_batch,baseline_updates\n";
  CHECK_THROWS_WITH(read(""), Contains("sweep.csv:1: empty file"));
  CHECK_THROWS_WITH(read("planner.alpha\n"), Contains("sweep.csv:1: header: no MODE_total_s"));
  CHECK_THROWS_WITH(read("planner.alpha,baseline_total_s,autocache_speedup\n"),
                    Contains("sweep.csv:1:3: expected baseline_speedup, found 'autocache_speedup'"));
  CHECK_THROWS_WITH(read("a,baseline_total_s\n"), Contains("sweep.csv:1:3: expected baseline_speedup"));
  CHECK_THROWS_WITH(read("a,baseline_total_s,baseline_speedup,baseline_fits\n"),
                    Contains("sweep.csv:1:5: expected baseline_global_batch, found ''"));
  CHECK_THROWS_WITH(read(header + "0.1,5,1,1,8,9\n0.2,x,1,1,8,9\n"),
                    Contains("sweep.csv:3:2: expected a finite number, found 'x'"));
  CHECK_THROWS_WITH(read(header + "0.1,5,inf,1,8,9\n"), Contains("sweep.csv:2:3: expected a finite number"));
  CHECK_THROWS_WITH(read(header + "0.1,5,1e999,1,8,9\n"), Contains("sweep.csv:2:3"));
  CHECK_THROWS_WITH(read(header + "0.1,5\n"), Contains("sweep.csv:2: expected 6 cells, found 2"));
  CHECK_THROWS_WITH(read(header + ",5,1,1,8,9\n"), Contains("sweep.csv:2:1: empty value of planner.alpha"));
  CHECK_THROWS_WITH(read(header + "0.1,5 ,1,1,8,9\n"), Contains("sweep.csv:2:2"));
  CHECK_THROWS_WITH(read(header + "0.1,5,1,yes,8,9\n"), Contains("sweep.csv:2:4: expected 0 or 1, found 'yes'"));
  CHECK_THROWS_WITH(read(header + "0.1,5,1,1,-8,9\n"), Contains("sweep.csv:2:5: expected a count"));
  CHECK_THROWS_WITH(read(header + "0.1,5,1,1,8,9.5\n"), Contains("sweep.csv:2:6: expected a count"));
  CHECK(!read(header + "0.1,5,,1,8,9\n").rows[0].modes[0].speedup);  // none: the reference does not fit
}
