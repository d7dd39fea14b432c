// The sweep: --set lists to points, and points run in groups that share a
// platform and a memo give what each point gives on its own.
#include <catch2/catch.hpp>

#include "planner/error.hpp"
#include "sim/driver.hpp"
#include "sim/isolate.hpp"
#include "sim/sweep.hpp"
#include "tests/sim/support.hpp"

using namespace ep;
using namespace ep::sim;
using Catch::Matchers::Contains;

TEST_CASE("sweep_values splits a list and keeps TOML arrays and strings whole", "[sweep]") {
  CHECK(sweep_values("planner.alpha=0.25,0.5") == std::vector<std::string>{"planner.alpha=0.25", "planner.alpha=0.5"});
  CHECK(sweep_values("a.b=[1,2],[3]") == std::vector<std::string>{"a.b=[1,2]", "a.b=[3]"});
  CHECK(sweep_values("cluster.name=\"a,b\"") == std::vector<std::string>{"cluster.name=\"a,b\""});
  CHECK(sweep_values("a.b='x,]',\"y\"") == std::vector<std::string>{"a.b='x,]'", "a.b=\"y\""});
  CHECK(sweep_values("a.b=7") == std::vector<std::string>{"a.b=7"});
  CHECK_THROWS_WITH(sweep_values("planner.alpha"), Contains("expected KEY=V1,V2"));
}

TEST_CASE("sweep_points is the cartesian product, the first list slowest", "[sweep]") {
  const std::vector<Overrides> p = sweep_points({"a.x=1,2", "b.y=3,4,5"});
  REQUIRE(p.size() == 6);
  CHECK(p[0] == Overrides{"a.x=1", "b.y=3"});
  CHECK(p[2] == Overrides{"a.x=1", "b.y=5"});
  CHECK(p[3] == Overrides{"a.x=2", "b.y=3"});
  CHECK(sweep_points({}) == std::vector<Overrides>{{}});
}

TEST_CASE("a sweep beyond kMaxSweepPoints is refused before it is built", "[sweep]") {
  std::string many = "planner.alpha=";
  for (int i = 0; i < 40; ++i) many += (i ? "," : "") + std::to_string(i);
  CHECK(sweep_points({many}).size() == 40);
  CHECK_THROWS_WITH(sweep_points({many, many}), Contains("more than 1000 points"));
}

namespace {

// Every point of a sweep gives bit for bit what it gives simulated alone,
// in a process of its own.
void check_each_alone(const std::vector<Config>& configs, const std::vector<Overrides>& points,
                      const SweepOptions& opt, const std::vector<std::vector<SweepModeResult>>& results) {
  REQUIRE(results.size() == points.size());
  for (std::size_t i = 0; i < points.size(); ++i) {
    std::string where;
    for (const auto& o : points[i]) where += o + " ";
    INFO(where);
    const std::string bytes = run_in_child([&](ByteWriter& w) {
      Simulator sim(configs[i].cluster);
      RunOptions ro;
      ro.modes = opt.modes;
      for (const auto& m : simulate_training(configs[i], ro, sim).summary.modes)
        w.put_all(m.total_s, m.speedup, m.samples_per_s, m.fits_memory, m.global_batch_max, m.updates);
    });
    ByteReader r(bytes);
    REQUIRE(results[i].size() == opt.modes.size());
    for (std::size_t m = 0; m < opt.modes.size(); ++m) {
      CHECK(results[i][m].mode == opt.modes[m]);
      CHECK(results[i][m].total_s == r.get<double>());  // bit-identical
      CHECK(results[i][m].speedup == r.get<std::optional<double>>());
      CHECK(results[i][m].samples_per_s == r.get<double>());
      CHECK(results[i][m].fits_memory == r.get<bool>());
      CHECK(results[i][m].global_batch == r.get<std::int64_t>());
      CHECK(results[i][m].updates == r.get<std::int64_t>());
    }
  }
}

}  // namespace

TEST_CASE("points run together give what each gives alone", "[sweep]") {
  // Two clusters (two groups), two alphas each: the groups share a memo
  // across their points; each point alone is simulated in its own process.
  const std::vector<Overrides> points =
      sweep_points({"planner.alpha=0.25,0.5", "cluster.intra_node.bandwidth_bytes_per_s=1e10,2e10"});
  std::vector<Config> configs;
  for (const Overrides& p : points) {
    Overrides o{"data.num_train_samples=1024"};
    o.insert(o.end(), p.begin(), p.end());
    configs.push_back(test::tiny_bert(o));
  }
  SweepOptions opt;
  std::vector<std::size_t> progress;
  opt.progress = [&](std::size_t done) { progress.push_back(done); };
  const auto results = run_sweep(configs, points, opt);
  REQUIRE(progress.size() == 2);  // one call per group
  CHECK(progress.back() == points.size());
  check_each_alone(configs, points, opt, results);
  // The alphas differ in the configured mode, not in the baseline.
  CHECK(results[0][0].total_s == results[2][0].total_s);
  CHECK(results[0][1].total_s != results[2][1].total_s);
}

// The memo of one group tells apart what the device changes without
// changing a duration: a GPU's cache writes behind and reads ahead.
TEST_CASE("points that differ only in how the cache overlaps are simulated apart", "[sweep]") {
  const std::vector<Overrides> points = sweep_points({"exec.device=\"cpu\",\"cuda\""});
  REQUIRE(points.size() == 2);
  std::vector<Config> configs;
  for (const Overrides& p : points) {
    Overrides o{"data.num_train_samples=1024", "planner.cache=\"on\"", "planner.alpha=0.5",
                "cluster.host.memory_bandwidth_bytes_per_s=2e8"};
    o.insert(o.end(), p.begin(), p.end());
    configs.push_back(test::tiny_bert(o));
  }
  SweepOptions opt;
  opt.modes = {Mode::Baseline, Mode::Configured};
  const auto results = run_sweep(configs, points, opt);
  check_each_alone(configs, points, opt, results);
  CHECK(results[0][1].total_s != results[1][1].total_s);
}

TEST_CASE("run_sweep refuses configs and points of different counts", "[sweep]") {
  CHECK_THROWS_WITH(run_sweep({test::tiny_bert()}, {}, SweepOptions{}), Contains("1 configs for 0 points"));
}
