// trace diff: alignment by (plan, replica, action) and per-kind error;
// epochs side by side.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "traces/diff.hpp"
#include "traces/plan_epoch.hpp"
#include "tests/temp_dir.hpp"
#include "traces/csv.hpp"

using namespace ep::trace;

namespace {

// Two replicas, `iterations` iterations of F and B on one GPU each, plus a
// link span that diff must ignore. The forward of an epoch's first
// iteration takes `first_forward_s` (default: as the later ones).
Trace run(int iterations, double forward_s, double first_forward_s = 0) {
  Trace t;
  t.source = "sim";
  const int link = t.track({TrackKind::Link, 0, 0, "pcie0.up"});
  for (int replica : {0, 1}) {
    const int gpu = t.track({TrackKind::Gpu, 0, replica, "gpu" + std::to_string(replica)});
    double clock = 0;
    for (int it = 0; it < iterations; ++it)
      for (const char* name : {"0F0", "0B0"}) {
        Event e;
        e.track = gpu;
        e.name = name;
        e.category = name[1] == 'F' ? "forward" : "backward";
        e.replica = replica;
        e.plan_id = 0;
        e.iteration = it;
        e.start_s = clock;
        e.end_s = clock += name[1] == 'B' ? 2e-3 : (it == 0 && first_forward_s > 0 ? first_forward_s : forward_s);
        t.events.push_back(e);
      }
  }
  Event l;
  l.track = link;
  l.name = "transfer";
  l.category = "send";
  l.end_s = 1;
  t.events.push_back(l);
  return t;
}

}  // namespace

TEST_CASE("a trace diffed with itself has no error", "[traces][diff]") {
  const Trace t = run(3, 1e-3);
  const TraceDiff d = diff_traces(t, t);
  REQUIRE(d.phases.size() == 2);  // later iterations, then the first
  CHECK(d.held_by_one.empty());
  for (const PhaseDiff& p : d.phases) {
    CHECK(p.categories.size() == 2);  // forward, backward; the link span is left out
    CHECK(p.total.matched == 4);      // 2 actions x 2 replicas
    CHECK(p.total.mape == 0);
    CHECK(p.total.only_first == 0);
  }
}

TEST_CASE("diff aligns runs with different iteration counts and measures per kind", "[traces][diff]") {
  // Two traced iterations (a simulation) against five (a real run), forward 10% off.
  const TraceDiff d = diff_traces(run(2, 1.1e-3), run(5, 1e-3));
  REQUIRE(d.phases.size() == 2);
  for (const PhaseDiff& p : d.phases) {
    REQUIRE(p.categories.size() == 2);
    CHECK(p.categories[0].category == "forward");
    CHECK(p.categories[0].matched == 2);
    CHECK(p.categories[0].mape == Approx(0.10));
    CHECK(p.categories[0].mean_abs_error_s == Approx(1e-4));
    CHECK(p.categories[1].category == "backward");
    CHECK(p.categories[1].mape == 0);
    CHECK(p.total.mape == Approx(0.1e-3 / 3e-3));  // weighted by time: 0.1 ms off in 3 ms
  }
}

// An epoch's first iteration pays what later ones find ready (on a GPU, a
// cache read that cannot run ahead of the device yet): 2 ms against
// 0.1 ms. Mixing both into one mean made a correct simulation look 10x off.
TEST_CASE("diff compares an epoch's first iteration only with first ones", "[traces][diff]") {
  const Trace sim = run(2, 0.1e-3, 2e-3), real = run(20, 0.1e-3, 2e-3);
  const TraceDiff d = diff_traces(sim, real);
  REQUIRE(d.phases.size() == 2);
  CHECK(d.phases[0].phase == IterationPhase::Later);
  CHECK(d.phases[1].phase == IterationPhase::First);
  for (const PhaseDiff& p : d.phases) CHECK(p.total.mape == Approx(0).margin(1e-12));
  CHECK(d.phases[0].categories[0].second_mean_s == Approx(0.1e-3));
  CHECK(d.phases[1].categories[0].second_mean_s == Approx(2e-3));
  // A real run that traced only each epoch's first iteration: those are
  // compared, and the table says the steady ones are the simulation's alone.
  const TraceDiff first_only = diff_traces(sim, run(1, 0.1e-3, 2e-3));
  REQUIRE(first_only.phases.size() == 1);
  CHECK(first_only.phases[0].phase == IterationPhase::First);
  CHECK(first_only.phases[0].total.mape == Approx(0).margin(1e-12));
  REQUIRE(first_only.held_by_one.size() == 1);
  CHECK(first_only.held_by_one[0] == std::pair{IterationPhase::Later, 1});
  CHECK_THAT(format_diff(first_only, sim, real),
             Catch::Contains("only the first trace holds them") && Catch::Contains("exec.trace_iterations >= 2"));
}

TEST_CASE("diff refuses traces with nothing to compare instead of reporting no error", "[traces][diff]") {
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(diff_traces(run(1, 1e-3), Trace{}), Contains("the second trace has no GPU spans"));
  CHECK_THROWS_WITH(diff_traces(Trace{}, run(1, 1e-3)), Contains("the first trace has no GPU spans"));
  Trace vit = run(1, 1e-3), bert = run(1, 1e-3);
  vit.metadata["model"] = "vit L=12";
  bert.metadata["model"] = "bert L=24";
  CHECK_THROWS_WITH(diff_traces(vit, bert), Contains("different workloads: model") && Contains("'vit L=12'") &&
                                                 Contains("'bert L=24'"));
  CHECK_THROWS(diff_traces(vit, bert, true));  // another family is never alike
  bert.metadata["model"] = "vit L=12";
  CHECK_NOTHROW(diff_traces(vit, bert));
  // Another size or batch: refused unless asked.
  vit.metadata["workload"] = "hidden 512, intermediate 2048, heads 8, tokens 65, fp32";
  bert.metadata["workload"] = "hidden 64, intermediate 256, heads 2, tokens 65, fp32";
  CHECK_THROWS_WITH(diff_traces(vit, bert), Contains("workload 'hidden 512") && Contains("--any-workload"));
  bert.metadata["workload"] = vit.metadata["workload"];
  vit.metadata["batch_size"] = "256";
  bert.metadata["batch_size"] = "64";
  CHECK_THROWS_WITH(diff_traces(vit, bert), Contains("batch_size '256' in the first, '64' in the second"));
  CHECK_NOTHROW(diff_traces(vit, bert, true));
  Trace other = run(1, 1e-3);
  for (Event& e : other.events) e.plan_id = 7;  // another run's plans: nothing in common
  CHECK_THROWS_WITH(diff_traces(run(1, 1e-3), other), Contains("no action of the first trace matches"));
  // Only later iterations against only first ones: nothing alike.
  Trace later = run(2, 1e-3);
  std::erase_if(later.events, [](const Event& e) { return e.iteration == 0; });
  CHECK_THROWS_WITH(diff_traces(later, run(1, 1e-3)), Contains("no action of the first trace matches"));
}

namespace {

EpochMetrics epoch_row(const std::string& mode, int epoch, int frozen, double epoch_s, double transition_s,
                       double iteration_s, int K = 1, int replicas = 1, int M = 4) {
  EpochMetrics e;
  e.mode = mode;
  e.epoch = epoch;
  e.frozen_layers = frozen;
  e.K = K;
  e.replicas = replicas;
  e.M = M;
  e.epoch_s = epoch_s + transition_s;  // as plan_epoch_row writes it: the transition included
  e.transition_s = transition_s;
  e.iteration_s = iteration_s;
  return e;
}

}  // namespace

TEST_CASE("epochs diff: each run's rows of its mode, epoch plus transition, as far as both go", "[traces][diff]") {
  // A simulation of every mode against a real run cut short after 2 epochs.
  std::vector<EpochMetrics> sim;
  for (const char* mode : {"baseline", "autocache"})
    for (int e = 0; e < 3; ++e)
      sim.push_back(epoch_row(mode, e, mode[0] == 'b' ? 0 : 2 * e, 10.0 - e, e == 0 ? 2.0 : 0.5, 0.1));
  const std::vector<EpochMetrics> real = {epoch_row("train", 0, 0, 11.0, 1.0, 0.11),
                                          epoch_row("train", 1, 2, 8.0, 0.5, 0.09)};
  const std::vector<EpochDiff> d = diff_epochs(sim, "autocache", real, "train");
  REQUIRE(d.size() == 2);
  CHECK(d[0].first_s == Approx(12.0));  // 10 s + its 2 s transition
  CHECK(d[0].second_s == Approx(12.0));
  CHECK(d[1].first_s == Approx(9.5));
  CHECK(d[1].second_s == Approx(8.5));
  CHECK(d[1].frozen_first == 2);
  CHECK(d[1].second_iteration_s == Approx(0.09));
  CHECK(d[0].first_transition_s == Approx(2.0));  // each run's own, side by side
  CHECK(d[0].second_transition_s == Approx(1.0));
  const std::string table = format_epoch_diff(d);
  CHECK_THAT(table, Catch::Contains("2.000 / 1.000") && Catch::Contains("0.500 / 0.500"));
  CHECK_THAT(table, Catch::Contains("+0.0%"));   // epoch 1
  CHECK_THAT(table, Catch::Contains("+11.8%"));  // epoch 2: 9.5 against 8.5
  CHECK_THAT(table, Catch::Contains("+4.9%"));   // the run: 21.5 against 20.5
  CHECK_THAT(table, Catch::Contains("largest |error|: 11.8% per epoch, 11.1% per iteration"));
  CHECK_THAT(table, !Catch::Contains("froze different layers") && !Catch::Contains("layouts differ") &&
                        !Catch::Contains("different micro-batch counts"));
  // Different decisions and layouts are said, not hidden.
  const std::string other = format_epoch_diff(diff_epochs(sim, "baseline", real, "train"));
  CHECK_THAT(other, Catch::Contains("0|2") && Catch::Contains("froze different layers"));
  // Per-layer freezing (decision 0037): the same prefix, different layers
  // frozen inside, is a different decision too, and the table shows both sets.
  std::vector<EpochMetrics> inside = real;
  inside[1].frozen_inside = "4 5";
  const std::vector<EpochDiff> sets = diff_epochs(sim, "autocache", inside, "train");
  CHECK(sets[1].frozen_inside_first == "-");
  CHECK(sets[1].frozen_inside_second == "4 5");
  CHECK_THAT(format_epoch_diff(sets), Catch::Contains("2|2+2") && Catch::Contains("froze different layers"));
  std::vector<EpochMetrics> inside_sim = sim;
  inside_sim[4].frozen_inside = "4 5";  // autocache, epoch 2: the same set
  CHECK_THAT(format_epoch_diff(diff_epochs(inside_sim, "autocache", inside, "train")),
             Catch::Contains(" 2+2 ") && !Catch::Contains("froze different layers"));
  const std::vector<EpochMetrics> replicated = {epoch_row("train", 0, 0, 11.0, 1.0, 0.11, 2, 4)};
  CHECK_THAT(format_epoch_diff(diff_epochs(sim, "autocache", replicated, "train")),
             Catch::Contains("1x1,4|2x4,4") && Catch::Contains("layouts differ"));
  // The same layout at another M: the chunk searches chose differently.
  const std::vector<EpochMetrics> other_M = {epoch_row("train", 0, 0, 11.0, 1.0, 0.11, 1, 1, 3)};
  CHECK_THAT(format_epoch_diff(diff_epochs(sim, "autocache", other_M, "train")),
             Catch::Contains("1x1,4|1x1,3") && Catch::Contains("different micro-batch counts M") &&
                 !Catch::Contains("layouts differ"));
  // A mode a run does not have is an error naming it.
  CHECK_THROWS_WITH(diff_epochs(sim, "autodp", real, "train"),
                    Catch::Contains("first run's epochs.csv has no epoch of mode 'autodp'"));
}

// The rows as both back ends write them (plan_epoch_row: epoch_s holds the
// transition charged to the epoch): the diff counts the transition once.
TEST_CASE("epochs diff: the transition in a written row counts once", "[traces][diff]") {
  ep::Plan plan;
  plan.K = 1;
  plan.M = 2;
  plan.layout.replicas = 1;
  const EpochMetrics sim = plan_epoch_row(plan, 0, "sim", "autocache", 10.0, 0.75, false);
  const EpochMetrics real = plan_epoch_row(plan, 0, "exec", "train", 10.5, 0.0, false);
  const std::vector<EpochDiff> d = diff_epochs({sim}, "autocache", {real}, "train");
  REQUIRE(d.size() == 1);
  CHECK(d[0].first_s == Approx(10.75));
  CHECK(d[0].second_s == Approx(10.5));
  CHECK_THAT(format_epoch_diff(d), Catch::Contains("+2.4%"));
}

// The runs' starts are compared apart from the epochs; where a run's chunk
// search ran in its start, it did the one-off work there: said under the
// table, for whichever run it was.
TEST_CASE("epochs diff: the starts side by side, a chunk search named for the run that had it", "[traces][diff]") {
  Trace sim, real;
  sim.source = "sim";
  real.source = "exec";
  CHECK(format_start_notes(sim, real).empty());
  real.metadata[kChunkSearchBeforeFirstEpochKey] = "2.780";
  std::string notes = format_start_notes(sim, real);
  CHECK_THAT(notes, Catch::StartsWith("second: its chunk search ran in its start (2.780 s)"));
  CHECK_THAT(notes, !Catch::Contains("first:"));
  CHECK_THAT(format_start_notes(real, sim), Catch::StartsWith("first: its chunk search ran in its start"));
  sim.metadata[kStartKey] = "0.6000";
  CHECK_THAT(format_start_notes(sim, real), !Catch::Contains("start (before epoch 1"));  // one start: no comparison
  real.metadata[kStartKey] = "3.000";
  notes = format_start_notes(sim, real);
  CHECK_THAT(notes, Catch::StartsWith("start (before epoch 1, in no epoch): first 0.600 s, second 3.000 s, error -80.0%"));
  CHECK_THAT(notes, Catch::Contains("second: its chunk search ran in its start"));
  real.metadata[kStartKey] = "soon";
  CHECK_THROWS_WITH(format_start_notes(sim, real), Catch::Contains("expected a finite number, found 'soon'"));
  real.metadata[kStartKey] = "3.0s";  // all of it a number, not a prefix
  CHECK_THROWS_WITH(format_start_notes(sim, real), Catch::Contains("found '3.0s'"));
}

// The CSV a bench reads to set many runs beside one simulation: the same
// figures as the table, every double as written, the start and the sum.
TEST_CASE("epochs diff as CSV: a row per epoch, then the starts and the whole run", "[traces][diff]") {
  const std::vector<EpochMetrics> sim = {epoch_row("autocache", 0, 0, 10.0, 2.0, 0.1),
                                         epoch_row("autocache", 1, 2, 9.0, 0.5, 0.1 / 3)};
  const std::vector<EpochMetrics> real = {epoch_row("train", 0, 0, 11.0, 1.0, 0.11, 1, 1, 3),
                                          epoch_row("train", 1, 2, 8.0, 0.5, 0.0)};
  const std::vector<EpochDiff> d = diff_epochs(sim, "autocache", real, "train");
  const ep::test::TempDir dir("diff_csv");
  const auto rows_of = [&](std::optional<double> a, std::optional<double> b) {
    write_epoch_diff_csv(d, a, b, dir.file("d.csv"));
    std::ifstream in(dir.file("d.csv"));
    std::vector<std::vector<std::string>> rows;
    for (std::string line; std::getline(in, line);) rows.push_back(csv::cells(line));
    return rows;
  };
  const auto rows = rows_of(1.5, 1.25);
  REQUIRE(rows.size() == 5);  // header, 2 epochs, start, all
  for (const auto& r : rows) CHECK(r.size() == 19);
  CHECK(rows[0][0] == "row");
  CHECK(rows[0][11] == "error");
  CHECK(rows[1] == std::vector<std::string>{"1", "0", "0", "1", "1", "1", "1", "4", "3", "12", "12", "0", "2", "1",
                                            "0.1", "0.11", csv::shortest((0.1 - 0.11) / 0.11), "-", "-"});
  CHECK(std::stod(rows[2][14]) == 0.1 / 3);  // read back as the same double
  CHECK(rows[2][11] == csv::shortest((9.5 - 8.5) / 8.5));
  CHECK(rows[2][16].empty());  // no reference iteration: no error, rather than a division by zero
  CHECK(rows[3] == std::vector<std::string>{"start", "", "", "", "", "", "", "", "", "1.5", "1.25", "0.2", "", "", "",
                                            "", "", "", ""});
  CHECK(rows[4][0] == "all");
  CHECK(std::stod(rows[4][9]) == Approx(21.5));
  CHECK(std::stod(rows[4][10]) == Approx(20.5));
  // Without both starts, no start row.
  const auto without = rows_of(1.5, std::nullopt);
  REQUIRE(without.size() == 4);
  CHECK(without[3][0] == "all");
}
