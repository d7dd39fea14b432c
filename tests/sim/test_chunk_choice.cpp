// The time objective's chunk search asks SimGrid about a shortlist of M
// (the best few by the planner's own timeline). On the paper's configs the
// M it keeps must be the one an exhaustive SimGrid search over the whole
// chunk range keeps, or within 0.5% of its one-iteration time.
#include <catch2/catch.hpp>

#include "sim/driver.hpp"
#include "sim/isolate.hpp"
#include "tests/sim/support.hpp"

using namespace ep;
using namespace ep::sim;

namespace {

// Per mode and K met (the first plan with that K searches M): the
// shortlist's M and its time, the exhaustive M and its time.
struct Compared {
  int mode = 0, K = 0, M = 0, best_M = 0;
  double t = 0, best_t = 0;
};

std::vector<Compared> compare(const std::string& name) {
  const std::string bytes = run_in_child([&](ByteWriter& w) {
    const Config config = test::paper_config(name);
    Simulator sim(config.cluster);
    const RunResult r = simulate_training(config, RunOptions{}, sim);  // every mode
    for (const ModeRun& run : r.modes) {
      const Config mc = mode_config(config, run.mode);
      const AnalyticCostModel cost(mc.cluster, mc.training);
      const PlanContext ctx(mc, cost);
      const IterationPredictor simgrid = [&](const std::vector<IterationProgram>& programs, PredictionUse) {
        std::vector<IterationPrediction> out;
        for (const double t : simulate_chunk_iterations(mc, cost, programs, sim)) out.push_back({t, 0.0});
        return out;
      };
      for (const Plan& p : run.plan.plans) {
        if (p.chunk_table.empty()) continue;
        IterationSetup setup = iteration_setup(mc, p, false);
        setup.M = 0;
        ChunkSearch exhaustive(ctx, simgrid);
        const ChunkChoice& all = exhaustive.choose(setup, {});
        Compared c{static_cast<int>(run.mode), p.K, p.M, all.M, 0, all.iteration_s};
        for (const ChunkCandidate& cand : all.table)
          if (cand.M == p.M) c.t = cand.iteration_s;
        w.put(c);
      }
    }
  });
  ByteReader r(bytes);
  std::vector<Compared> out;
  while (true) {
    try {
      out.push_back(r.get<Compared>());
    } catch (const Error&) {
      break;  // the end of what the child sent
    }
  }
  return out;
}

void check(const std::string& name) {
  const std::vector<Compared> rows = compare(name);
  REQUIRE(!rows.empty());
  for (const Compared& c : rows) {
    INFO(name << " " << to_string(static_cast<Mode>(c.mode)) << " K=" << c.K << ": shortlist M=" << c.M << " " << c.t << " s, exhaustive M=" << c.best_M << " "
              << c.best_t << " s");
    REQUIRE(c.t > 0);
    CHECK((c.M == c.best_M || c.t <= 1.005 * c.best_t));
  }
}

}  // namespace

TEST_CASE("chunk search shortlist vs exhaustive: bert_base_sst2", "[chunk][slow]") { check("bert_base_sst2"); }
TEST_CASE("chunk search shortlist vs exhaustive: bert_large_squad", "[chunk][slow]") { check("bert_large_squad"); }
TEST_CASE("chunk search shortlist vs exhaustive: vit_cifar100", "[chunk][slow]") { check("vit_cifar100"); }
TEST_CASE("chunk search shortlist vs exhaustive: vit_imagenet", "[chunk][slow]") { check("vit_imagenet"); }
