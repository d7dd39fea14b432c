// The epoch CSV and the run summary: exact round trips, and malformed or
// damaged files named by file, line and column.
#include <catch2/catch.hpp>

#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "planner/error.hpp"
#include "tests/traces/damage.hpp"
#include "tests/traces/support.hpp"
#include "traces/trace.hpp"

using namespace ep::trace;
using ep::test::error_of;
using ep::test::require_error;
using ep::test::slurp;
using ep::test::spit;
using ep::test::survives_damage;
using ep::test::TempDir;
using json = nlohmann::ordered_json;

namespace {

std::vector<EpochMetrics> random_rows(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> i(-1, 5000);
  std::uniform_real_distribution<double> d(-1, 1);
  std::vector<EpochMetrics> rows;
  for (int r = 0; r < 30; ++r) {
    EpochMetrics m;
    m.source = r % 2 ? "sim" : "exec";
    m.mode = r % 3 ? "autocache" : "";
    m.epoch = i(rng), m.plan_id = i(rng), m.frozen_layers = i(rng), m.K = i(rng), m.M = i(rng);
    m.replicas = i(rng);
    m.frozen_inside = r % 4 == 0 ? "-" : std::to_string(r) + " " + std::to_string(r + 1 + i(rng) % 9);
    m.cache = r % 2;
    for (double* x : {&m.epoch_s, &m.iteration_s, &m.samples_per_s, &m.bubble_fraction, &m.exposed_comm_s,
                      &m.comm_s, &m.compute_s, &m.cache_hit_ratio, &m.transition_s, &m.loss, &m.accuracy})
      *x = d(rng) * std::pow(10.0, i(rng) % 40 - 20);
    rows.push_back(m);
  }
  rows[0].loss = -1;
  rows[1].epoch_s = 5e-324;  // the smallest subnormal
  rows[2].epoch_s = 1.7976931348623157e308;
  return rows;
}

RunSummary sample_summary() {
  RunSummary s;
  s.source = "sim";
  s.config = "configs/paper/vit_imagenet.toml";
  s.metadata = {{"network", "simgrid cm02"}, {"note", "say \"hi\""}};
  s.reference = "baseline";
  s.modes = {
      {"baseline", 3.5, 30742.125, 416.9, 1.0, std::nullopt, true, 1.5e10, 16020, 800, 800, 0.31, {3074.1, 3074.2, 0.1 + 0.2}},
      {"autocache", 0.1 + 0.7, 8337.0000000000018, 1537.2, 30742.125 / 8337.0000000000018, 0.8115, false, 2.25e10,
       6010, 800, 6400, 1.0 / 3, {1e-7, 2.5e300}},
      {"freeze", 0, 0, 0, std::nullopt, std::nullopt, true, 0, 0, 0, 0, 0, {}}};
  return s;
}

}  // namespace

TEST_CASE("epoch CSV: round trip is exact and byte-identical", "[traces]") {
  TempDir dir;
  for (std::uint64_t seed = 1; seed <= 5; ++seed) {
    const auto rows = random_rows(seed);
    write_epoch_csv(rows, dir.file("a.csv"));
    const auto back = read_epoch_csv(dir.file("a.csv"));
    REQUIRE(back == rows);
    write_epoch_csv(back, dir.file("b.csv"));
    REQUIRE(slurp(dir.file("a.csv")) == slurp(dir.file("b.csv")));
  }
  write_epoch_csv({}, dir.file("empty.csv"));
  CHECK(read_epoch_csv(dir.file("empty.csv")).empty());
  CHECK(slurp(dir.file("empty.csv")) ==
        "source,mode,epoch,plan_id,frozen_layers,frozen_inside,K,M,replicas,cache,epoch_s,iteration_s,samples_per_s,"
        "bubble_fraction,exposed_comm_s,comm_s,compute_s,cache_hit_ratio,transition_s,loss,accuracy\n");
}

TEST_CASE("epoch CSV: malformed files name file:line and the column", "[traces]") {
  TempDir dir;
  const std::string good = dir.file("good.csv"), bad = dir.file("bad.csv");
  write_epoch_csv(random_rows(7), good);
  std::vector<std::vector<std::string>> cells;
  {
    std::ifstream in(good);
    for (std::string line; std::getline(in, line);) {
      cells.emplace_back(1);
      for (const char c : line) {
        if (c == ',')
          cells.back().emplace_back();
        else
          cells.back().back().push_back(c);
      }
    }
  }
  const auto write_cells = [&](const std::vector<std::vector<std::string>>& cs) {
    std::string text;
    for (const auto& row : cs) {
      for (std::size_t i = 0; i < row.size(); ++i) text += (i ? "," : "") + row[i];
      text += "\n";
    }
    spit(bad, text);
  };
  SECTION("a missing column") {
    for (auto& row : cells) row.erase(row.begin() + 9);  // cache
    write_cells(cells);
    require_error([&] { read_epoch_csv(bad); }, {bad + ":1:", "missing column 'cache'"});
  }
  SECTION("columns out of order") {
    std::swap(cells[0][6], cells[0][7]);
    write_cells(cells);
    require_error([&] { read_epoch_csv(bad); }, {bad + ":1:", "out of order"});
  }
  SECTION("a non-numeric field") {
    cells[2][6] = "four";
    write_cells(cells);
    require_error([&] { read_epoch_csv(bad); }, {bad + ":3:", "column 'K'", "expected an integer", "'four'"});
  }
  SECTION("a non-numeric double") {
    cells[4][10] = "1.5s";
    write_cells(cells);
    require_error([&] { read_epoch_csv(bad); }, {bad + ":5:", "column 'epoch_s'", "'1.5s'"});
  }
  SECTION("a boolean that is not 0 or 1") {
    cells[1][9] = "true";
    write_cells(cells);
    require_error([&] { read_epoch_csv(bad); }, {bad + ":2:", "column 'cache'", "0 or 1"});
  }
  SECTION("a short row") {
    cells[3].pop_back();
    write_cells(cells);
    require_error([&] { read_epoch_csv(bad); }, {bad + ":4:", "expected 21 fields, found 20"});
  }
  SECTION("layers frozen inside that are not ascending") {
    cells[2][5] = "7 3";
    write_cells(cells);
    require_error([&] { read_epoch_csv(bad); }, {bad + ":3:", "column 'frozen_inside'", "'7 3'"});
  }
  SECTION("a file written before frozen_inside reads as none frozen inside") {
    for (auto& row : cells) row.erase(row.begin() + 5);
    write_cells(cells);
    const auto rows = read_epoch_csv(bad);
    REQUIRE(rows.size() == 30);
    for (const auto& r : rows) CHECK(r.frozen_inside == "-");
    CHECK(rows[3].K == random_rows(7)[3].K);
  }
  SECTION("an empty file") {
    spit(bad, "");
    require_error([&] { read_epoch_csv(bad); }, {bad + ":1:", "empty file"});
  }
  SECTION("a bad source") {
    cells[1][0] = "real";
    write_cells(cells);
    require_error([&] { read_epoch_csv(bad); }, {bad + ":2:", "source 'real'"});
  }
  SECTION("the writer refuses a comma in a string") {
    auto rows = random_rows(1);
    rows[3].mode = "freeze,autopipe";
    require_error([&] { write_epoch_csv(rows, bad); }, {"row 3", "column 'mode'"});
  }
}

TEST_CASE("epoch CSV and run summary: damaged files give an ep::Error, never a crash", "[traces]") {
  TempDir dir;
  write_epoch_csv(random_rows(3), dir.file("good.csv"));
  survives_damage(dir.file("good.csv"), dir.file("bad.csv"), read_epoch_csv, false);
  write_summary_json(sample_summary(), dir.file("good.json"));
  survives_damage(dir.file("good.json"), dir.file("bad.json"), read_summary_json, true);
}

TEST_CASE("run summary: round trip is exact and byte-identical", "[traces]") {
  TempDir dir;
  const RunSummary s = sample_summary();
  write_summary_json(s, dir.file("a.json"));
  const RunSummary back = read_summary_json(dir.file("a.json"));
  REQUIRE(back == s);
  write_summary_json(back, dir.file("b.json"));
  REQUIRE(slurp(dir.file("a.json")) == slurp(dir.file("b.json")));
  const json doc = json::parse(slurp(dir.file("a.json")));
  CHECK(doc["schema"] == kSchemaVersion);
  CHECK(doc["reference"] == "baseline");
  CHECK(doc["modes"][1]["mode"] == "autocache");
  // Absent values are JSON null, not sentinels a script could take for numbers.
  CHECK(doc["modes"][0]["final_accuracy"].is_null());
  CHECK(doc["modes"][2]["speedup"].is_null());
  CHECK(doc["modes"][1]["updates"].is_number_integer());
  RunSummary none = s;
  none.reference.reset();
  write_summary_json(none, dir.file("c.json"));
  CHECK(json::parse(slurp(dir.file("c.json")))["reference"].is_null());
  CHECK(read_summary_json(dir.file("c.json")) == none);
}

TEST_CASE("run summary: malformed files and summaries give an ep::Error", "[traces]") {
  TempDir dir;
  const std::string good = dir.file("good.json"), bad = dir.file("bad.json");
  write_summary_json(sample_summary(), good);
  json doc = json::parse(slurp(good));
  SECTION("a missing field") {
    doc["modes"][1].erase("speedup");
    spit(bad, doc.dump());
    require_error([&] { read_summary_json(bad); }, {bad, "modes[1]", "missing field 'speedup'"});
  }
  SECTION("a summary from before the run's start was kept apart") {
    doc["modes"][0].erase("start_s");
    spit(bad, doc.dump());
    require_error([&] { read_summary_json(bad); }, {bad, "modes[0]", "missing field 'start_s'"});
  }
  SECTION("a field of the wrong type") {
    doc["modes"][0]["epoch_s"][1] = "3074.2";
    spit(bad, doc.dump());
    require_error([&] { read_summary_json(bad); }, {"modes[0]", "'epoch_s'", "an array of numbers"});
  }
  SECTION("an unknown field") {
    doc["mode"] = "baseline";
    spit(bad, doc.dump());
    require_error([&] { read_summary_json(bad); }, {bad, "unknown field 'mode'"});
  }
  SECTION("wrong schema version") {
    doc["schema"] = "elasticpipe.plan/1";
    spit(bad, doc.dump());
    require_error([&] { read_summary_json(bad); }, {bad, "'schema'", "elasticpipe.plan/1"});
  }
  SECTION("a reference that is no mode of the file") {
    doc["reference"] = "gpipe";
    spit(bad, doc.dump());
    require_error([&] { read_summary_json(bad); }, {bad, "'reference'", "one of the modes", "gpipe"});
  }
  SECTION("a count that is no integer") {
    doc["modes"][0]["updates"] = 1.5;
    spit(bad, doc.dump());
    require_error([&] { read_summary_json(bad); }, {"modes[0]", "'updates'", "an integer"});
  }
  SECTION("a flag that is no boolean") {
    doc["modes"][0]["fits_memory"] = 1;
    spit(bad, doc.dump());
    require_error([&] { read_summary_json(bad); }, {"modes[0]", "'fits_memory'", "true or false"});
  }
  SECTION("a mode twice") {
    doc["modes"][2]["mode"] = "baseline";
    spit(bad, doc.dump());
    require_error([&] { read_summary_json(bad); }, {"modes[2]", "mode 'baseline' appears twice"});
  }
  SECTION("not JSON") {
    spit(bad, "modes: []");
    require_error([&] { read_summary_json(bad); }, {bad, "not valid JSON"});
  }
  SECTION("the writer refuses a number JSON cannot hold") {
    RunSummary s = sample_summary();
    s.modes[1].epoch_s[0] = INFINITY;
    require_error([&] { write_summary_json(s, bad); }, {"modes[1]", "'epoch_s[0]'", "finite"});
  }
}

