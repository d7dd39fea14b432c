// The whole-run driver: steady state vs exact, determinism, the ablation
// modes, the trace. One Simulator per TEST_CASE (see support.hpp).
#include <catch2/catch.hpp>

#include <filesystem>
#include <memory>
#include <map>
#include <random>
#include <set>
#include <fstream>
#include <sstream>

#include "sim/driver.hpp"
#include "tests/sim/support.hpp"
#include "traces/trace.hpp"

using namespace ep;
using namespace ep::sim;

namespace {

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::filesystem::path temp_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("ep_driver_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir;
}

// Small enough to simulate every iteration: 2 epochs of 64 iterations.
Config small(const Overrides& extra = {}) {
  Overrides o{"data.num_train_samples=2048", "training.epochs=2"};
  o.insert(o.end(), extra.begin(), extra.end());
  return test::tiny_bert(o);
}

}  // namespace

// An epoch is its first iteration from idle devices, the steady period for
// the rest, and the drain of the cache writes queued behind the devices:
// scaled so, the steady state gives what simulating every iteration does,
// over random small trainings (pipelines of 1, 2 or 4 stages, micro-batches,
// sequence lengths, the cache off, on a CPU, or on GPUs, where its reads
// run ahead and its writes behind the devices).
TEST_CASE("steady-state scaling gives the epochs of simulating every iteration", "[driver]") {
  std::mt19937 rng(2611);
  Simulator* sim = nullptr;
  std::unique_ptr<Simulator> owner;
  int gpu_cache_epochs = 0, edges = 0;
  for (int instance = 0; instance < 12; ++instance) {
    const int K = 1 << std::uniform_int_distribution<int>(0, 2)(rng);
    const int M = std::uniform_int_distribution<int>(1, 6)(rng);
    const bool gpu = instance % 2 == 1;
    const char* cache = instance % 3 == 0 ? "off" : "on";
    const Config c = test::tiny_bert({"planner.K=" + std::to_string(K), "planner.M=" + std::to_string(M),
                            "planner.freeze_interval_epochs=1", "training.epochs=3",
                            "data.num_train_samples=" + std::to_string(32 * std::uniform_int_distribution<int>(3, 20)(rng)),
                            std::string("planner.cache=\"") + cache + "\"",
                            std::string("exec.device=\"") + (gpu ? "cuda" : "cpu") + "\"",
                            "model.seq_length=" + std::to_string(16 * std::uniform_int_distribution<int>(1, 8)(rng))});
    if (!owner) owner = std::make_unique<Simulator>(c.cluster);  // one engine per process: one cluster for all
    sim = owner.get();
    RunOptions steady_opt;
    steady_opt.modes = {Mode::Freeze, Mode::AutoCache};
    RunOptions exact_opt = steady_opt;
    exact_opt.exact = true;
    const RunResult steady = simulate_training(c, steady_opt, *sim);
    const RunResult exact = simulate_training(c, exact_opt, *sim);
    REQUIRE(steady.modes.size() == exact.modes.size());
    for (std::size_t m = 0; m < steady.modes.size(); ++m)
      for (std::size_t e = 0; e < steady.modes[m].epochs.size(); ++e) {
        const trace::EpochMetrics& s = steady.modes[m].epochs[e];
        INFO("instance " << instance << " K " << K << " M " << M << " cache " << cache << (gpu ? " on GPUs" : " on CPUs")
                         << " mode " << to_string(steady.modes[m].mode) << " epoch " << e << " (K " << s.K << ", "
                         << s.frozen_layers << " frozen, cache " << s.cache << ")");
        CHECK(s.epoch_s == Approx(exact.modes[m].epochs[e].epoch_s).epsilon(1e-9));
        gpu_cache_epochs += gpu && s.cache;
        const Plan& p = steady.modes[m].plan.plans[s.plan_id];
        edges += std::abs(s.epoch_s - s.transition_s - p.iterations_per_epoch * s.iteration_s) > 1e-6 * s.epoch_s;
      }
  }
  CHECK(gpu_cache_epochs > 0);  // the reads ahead and writes behind were met
  CHECK(edges > 0);             // and epochs whose edges are not whole periods
}

TEST_CASE("the same config gives byte-identical output twice", "[driver]") {
  const Config c = small();
  Simulator sim(c.cluster);
  const auto a = temp_dir("a"), b = temp_dir("b");
  write_outputs(simulate_training(c, {}, sim), a.string());
  write_outputs(simulate_training(c, {}, sim), b.string());
  for (const char* f : {"summary.json", "epochs.csv", "chunks.csv", "trace.json"}) {
    INFO(f);
    REQUIRE(std::filesystem::exists(a / f));
    CHECK(slurp(a / f) == slurp(b / f));
  }
  std::filesystem::remove_all(a);
  std::filesystem::remove_all(b);
}

TEST_CASE("the modes: the best static plan, the paper's baseline, one piece each, the config as written", "[driver]") {
  const Config c = test::paper_config("bert_base_sst2", {"data.num_train_samples=20000"});
  Simulator sim(c.cluster);
  const RunResult r = simulate_training(c, {}, sim);
  REQUIRE(r.modes.size() == 7);
  const auto mode = [&](Mode m) -> const ModeRun& {
    return *std::find_if(r.modes.begin(), r.modes.end(), [&](const ModeRun& x) { return x.mode == m; });
  };
  const ModeRun& base = mode(Mode::Baseline);
  const ModeRun& gpipe = mode(Mode::GPipe);
  CHECK(r.modes[0].mode == Mode::Baseline);
  CHECK(r.reference == Mode::Baseline);
  for (const auto& e : gpipe.epochs) {  // the paper's: planner.K and its replicas throughout
    CHECK(e.frozen_layers == 0);
    CHECK(e.K == c.planner.K);
    CHECK(e.replicas == 2);
  }
  for (const auto& e : base.epochs) CHECK(e.frozen_layers == 0);
  // The best plan without freezing weighs the paper's among others.
  CHECK(base.total_s() <= gpipe.total_s() * 1.001);
  for (const auto& m : r.modes) {
    INFO(to_string(m.mode));
    for (const auto& e : m.epochs) {
      if (m.mode == Mode::Freeze) CHECK(e.K == c.planner.K);  // nothing moves
      if (m.mode == Mode::AutoPipe || m.mode == Mode::Freeze) CHECK(e.replicas == 2);
      if (m.mode != Mode::AutoCache && m.mode != Mode::Configured) CHECK_FALSE(e.cache);
      CHECK(e.epoch_s > 0);
      CHECK(e.iteration_s > 0);
      CHECK(e.bubble_fraction >= 0);
      CHECK(e.bubble_fraction < 1);
      CHECK(e.exposed_comm_s >= 0);
      CHECK(e.transition_s >= 0);
    }
  }
  // The config asks for the full method: configured is autocache's run.
  CHECK(mode(Mode::Configured).total_s() == mode(Mode::AutoCache).total_s());
  // The summary's speedups are over the baseline, and every mode trains
  // alike (the global batch policy): the same updates.
  for (const auto& s : r.summary.modes) {
    const auto& run = *std::find_if(r.modes.begin(), r.modes.end(), [&](const ModeRun& m) { return to_string(m.mode) == s.mode; });
    CHECK(s.total_s == Approx(run.total_s()));
    REQUIRE(s.speedup);
    CHECK(*s.speedup == Approx(base.total_s() / run.total_s()));
    CHECK(s.fits_memory);
    CHECK(s.updates == r.summary.modes[0].updates);
    CHECK(s.global_batch_max == r.summary.modes[0].global_batch_max);
    CHECK(s.utilisation > 0);
    CHECK(s.utilisation < 1);
  }
  CHECK(*r.summary.modes[0].speedup == Approx(1.0));
  CHECK(r.summary.reference == "baseline");
  // Chunk search in simulation: one row per M in [K, 6K] for each K met, the chosen M the fastest that fits.
  for (const auto& row : r.chunks) {
    CHECK(row.M >= row.K);
    CHECK(row.M <= 6 * row.K);
    if (!row.chosen) continue;
    for (const auto& other : r.chunks)
      if (other.mode == row.mode && other.K == row.K && other.fits_memory) CHECK(other.iteration_s >= row.iteration_s);
  }
}

TEST_CASE("an epoch's time is its iterations times the period plus its transition, the start is apart", "[driver]") {
  const Config c = small();
  Simulator sim(c.cluster);
  RunOptions opt;
  opt.modes = {Mode::AutoCache};
  const RunResult r = simulate_training(c, opt, sim);
  const ModeRun& m = r.modes.back();
  for (const auto& e : m.epochs) {
    const Plan& p = m.plan.plans[e.plan_id];
    CHECK(e.epoch_s == Approx(p.iterations_per_epoch * e.iteration_s + e.transition_s));
    CHECK(e.samples_per_s == Approx(c.data.num_train_samples / (e.epoch_s - e.transition_s)));
  }
  // The run's start is in no epoch: the one-off work (one replica: no DDP
  // to build) and the start's iterations, each SimGrid's time for the start
  // program from idle devices: less than the plan's, which steps.
  CHECK(m.epochs.front().transition_s == 0);
  const Plan& first = m.plan.plans.front();
  const AnalyticCostModel cost(c.cluster, c.training);
  const PlanContext ctx(c, cost);
  const double one = simulate_chunk_iterations(c, cost, {start_program(ctx, first, first.first_epoch)}, sim).at(0);
  CHECK(one < first.iteration_s);
  CHECK(m.start.total_s() == Approx(c.cluster.transition.context_creation_s +
                                    c.cluster.transition.warmup_iterations * first.iteration_s + kStartIterations * one));
  double epochs = 0;
  for (const auto& e : m.epochs) epochs += e.epoch_s;
  CHECK(m.total_s() == Approx(m.start.total_s() + epochs));
  CHECK(r.summary.modes.back().start_s == Approx(m.start.total_s()));
  CHECK(std::stod(r.trace.metadata.at(trace::kStartKey)) == Approx(m.start.total_s()).epsilon(1e-4));
}

// compute_s and the bubble describe the same iteration as iteration_s: in
// an epoch that fills the cache, the filling program's (it computes the
// frozen prefix), not the reading one's that follows.
TEST_CASE("an epoch's compute and bubble are those of the iteration it runs, filling ones included", "[driver]") {
  const Config c = test::tiny_bert({"data.num_train_samples=2048", "training.epochs=4", "planner.cache=\"on\""});
  Simulator sim(c.cluster);
  RunOptions opt;
  opt.modes = {Mode::AutoCache};
  const RunResult r = simulate_training(c, opt, sim);
  int fills = 0;
  for (const auto& e : r.modes.back().epochs) {
    INFO("epoch " << e.epoch << " frozen " << e.frozen_layers << " K " << e.K);
    const Plan& p = r.modes.back().plan.plans[e.plan_id];
    const CacheRole role = p.cache_role(e.epoch);
    fills += role == CacheRole::Fill || role == CacheRole::Advance;
    CHECK(e.compute_s > 0);
    CHECK(e.compute_s == Approx(e.iteration_s * (1 - e.bubble_fraction)).epsilon(1e-9));
  }
  CHECK(fills > 0);
}

TEST_CASE("the trace is valid trace-event JSON with two iterations per distinct plan", "[driver]") {
  const Config c = small();
  Simulator sim(c.cluster);
  const auto dir = temp_dir("trace");
  const RunResult r = simulate_training(c, {}, sim);
  write_outputs(r, dir.string());
  const trace::Trace t = trace::read_chrome_trace((dir / "trace.json").string());  // validates
  CHECK(t.source == "sim");
  CHECK(t.mode == "configured");
  CHECK(t.events.size() == r.trace.events.size());
  int computes = 0;
  std::map<int, std::set<int>> iterations;  // per plan
  for (const auto& e : t.events) {
    CHECK(e.end_s >= e.start_s);
    if (e.category == "forward" || e.category == "backward") {
      ++computes;
      iterations[e.plan_id].insert(e.iteration);
    }
  }
  CHECK(computes > 0);
  REQUIRE(!iterations.empty());
  for (const auto& [plan, its] : iterations) {
    INFO("plan " << plan);
    CHECK(its == std::set<int>{0, 1});  // an epoch's first iteration and the steady one after it
  }
  std::filesystem::remove_all(dir);
}

// On GPUs the cache reads run ahead of the devices: the first iteration
// waits for its read, the next finds it landed (what a real run's traced
// iterations show, and what trace diff compares like with like).
TEST_CASE("the trace's second iteration finds its cache reads ahead of the device", "[driver]") {
  const Config c = test::tiny_bert({"data.num_train_samples=2048", "training.epochs=3", "planner.cache=\"on\"",
                                    "exec.device=\"cuda\"", "planner.freeze_interval_epochs=1"});
  Simulator sim(c.cluster);
  RunOptions o;
  o.modes = {Mode::AutoCache};
  const RunResult r = simulate_training(c, o, sim);
  std::map<int, double> read_s;  // per iteration: the device's cache-read spans
  for (const auto& e : r.trace.events)
    if (e.category == "cache_read" && r.trace.tracks.at(e.track).kind == trace::TrackKind::Gpu)
      read_s[e.iteration] += e.end_s - e.start_s;
  REQUIRE(read_s.count(0));
  REQUIRE(read_s.count(1));
  CHECK(read_s[0] > 0);
  CHECK(read_s[1] < 0.5 * read_s[0]);
}
