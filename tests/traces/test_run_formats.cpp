// The executor's output formats: iterations.csv, transitions.json, the run
// state a checkpoint carries, and the plan.json reader. Round trips and
// malformed files.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "planner/error.hpp"
#include "tests/traces/support.hpp"
#include "traces/chunk_memo.hpp"
#include "traces/run_outputs.hpp"

using namespace ep;
using Catch::Matchers::Contains;

namespace {

void put(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

std::string iterations_text(const std::vector<double>& losses) {
  std::ostringstream out;
  trace::write_iterations_csv(losses, out, "iterations.csv");
  return out.str();
}

std::string transitions_text(const std::vector<trace::TransitionCost>& t) {
  std::ostringstream out;
  trace::write_transitions_json(t, out, "transitions.json");
  return out.str();
}

trace::TransitionCost sample_transition(int epoch) {
  trace::TransitionCost t;
  t.epoch = epoch;
  t.frozen_before = 1;
  t.frozen_after = 3;
  t.K_before = 4;
  t.K_after = 2;
  t.replicas_before = 1;
  t.replicas_after = 2;
  t.cache_probe_s = 0.25;
  t.planning_s = 0.1;
  t.state_transfer_s = 0.30000000000000004;
  t.rebuild_s = 1e-7;
  t.repartition_s = 0.0123456789012345;
  t.warmup_s = 2.5;
  t.first_batch_prefetched = true;
  t.first_batch_wait_s = 0.03125;
  return t;
}

trace::EpochMetrics sample_epoch(int epoch) {
  trace::EpochMetrics m;
  m.source = "exec";
  m.mode = "train";
  m.epoch = epoch;
  m.plan_id = epoch / 2;
  m.frozen_layers = epoch;
  m.K = 4;
  m.M = 8;
  m.replicas = 2;
  m.cache = epoch % 2 == 1;
  m.epoch_s = 12.5 + epoch;
  m.iteration_s = 0.1 / 3;
  m.samples_per_s = 1234.5;
  m.bubble_fraction = 0.25;
  m.comm_s = 1e-3;
  m.compute_s = 0.02;
  m.cache_hit_ratio = m.cache ? 1 : 0;
  m.transition_s = 0.5;
  m.loss = 2.302585092994046;
  m.accuracy = 0.8431;
  return m;
}

trace::RunState sample_state() {
  trace::RunState s;
  s.epoch = 2;
  s.consumed = 512;
  s.iteration = 16;
  s.interval_norm_sum = {0.5, 1.0 / 3, 2e-9};
  s.interval_iterations = 16;
  s.steps = {{0, std::nullopt}, {1, MeasuredCache{0.001, 0.004}}};
  s.chunk_times = {{4, {0.1, 0.2, 0.30000000000000004}}, {2, {0.5}}};
  s.train_s = 33.25;
  s.epoch_loss_sum = 123.456;
  s.epoch_real = 500;
  s.epoch_correct = 400;
  s.epoch_elapsed_s = 4.75;
  s.epochs = {sample_epoch(0), sample_epoch(1)};
  s.transitions = {sample_transition(1)};
  s.iteration_losses = {2.3, 2.1, 1.9999999999999998};
  s.grad_norms = {{1, 2, 3}, {0.5, 0.25, 0.125}};
  return s;
}

void require_same(const trace::RunState& a, const trace::RunState& b) {
  REQUIRE(a.epoch == b.epoch);
  REQUIRE(a.consumed == b.consumed);
  REQUIRE(a.iteration == b.iteration);
  REQUIRE(a.interval_norm_sum == b.interval_norm_sum);
  REQUIRE(a.interval_iterations == b.interval_iterations);
  REQUIRE(a.steps.size() == b.steps.size());
  for (std::size_t i = 0; i < a.steps.size(); ++i) {
    REQUIRE(a.steps[i].frozen_layers == b.steps[i].frozen_layers);
    REQUIRE(a.steps[i].cache.has_value() == b.steps[i].cache.has_value());
    if (!a.steps[i].cache) continue;
    REQUIRE(a.steps[i].cache->read_s == b.steps[i].cache->read_s);
    REQUIRE(a.steps[i].cache->frozen_forward_s == b.steps[i].cache->frozen_forward_s);
  }
  REQUIRE(a.chunk_times == b.chunk_times);
  REQUIRE(a.train_s == b.train_s);
  REQUIRE(a.epoch_loss_sum == b.epoch_loss_sum);
  REQUIRE(a.epoch_real == b.epoch_real);
  REQUIRE(a.epoch_correct == b.epoch_correct);
  REQUIRE(a.epoch_elapsed_s == b.epoch_elapsed_s);
  REQUIRE(a.epochs == b.epochs);
  REQUIRE(a.transitions == b.transitions);
  REQUIRE(a.iteration_losses == b.iteration_losses);
  REQUIRE(a.grad_norms == b.grad_norms);
}

// `text` with the first `from` replaced by `to` (which must occur).
std::string edit(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

// A check that `read(path)` refuses `text` (written to `path`) with an
// error containing `message`.
template <class Read>
auto refusals(const std::string& path, Read read) {
  return [path, read](const std::string& text, const std::string& message) {
    put(path, text);
    REQUIRE_THROWS_WITH(read(path), Contains(message));
  };
}

}  // namespace

TEST_CASE("iterations CSV: the bytes, a round trip to 9 digits, and a byte-identical rewrite", "[traces]") {
  test::TempDir dir;
  const std::vector<double> losses = {2.302585092994046, 0.5, 1e-12, 123456.789};
  const std::string text = iterations_text(losses);
  REQUIRE(text == "iteration,loss\n0,2.30258509\n1,0.5\n2,1e-12\n3,123456.789\n");
  put(dir.file("iterations.csv"), text);
  const std::vector<double> back = trace::read_iterations_csv(dir.file("iterations.csv"));
  REQUIRE(back.size() == losses.size());
  for (std::size_t i = 0; i < losses.size(); ++i) REQUIRE(back[i] == Approx(losses[i]).epsilon(1e-8));
  REQUIRE(iterations_text(back) == text);
  REQUIRE(iterations_text({}) == "iteration,loss\n");
}

TEST_CASE("iterations CSV: malformed files name file:line, the column, expected and found", "[traces]") {
  test::TempDir dir;
  const std::string path = dir.file("iterations.csv");
  const auto fails = refusals(path, [](const std::string& p) { return trace::read_iterations_csv(p); });
  fails("", path + ":1: empty file");
  fails("iteration,losses\n", path + ":1: header: expected 'iteration,loss', found 'iteration,losses'");
  fails("iteration,loss\n0,1.5\n2,1.5\n", path + ":3: column 'iteration': expected 1, found '2'");
  fails("iteration,loss\n0,abc\n", path + ":2: column 'loss': expected a number, found 'abc'");
  fails("iteration,loss\n0,1,2\n", path + ":2: expected 2 fields");
  fails("iteration,loss\n0\n", path + ":2: expected 2 fields");
  REQUIRE_THROWS_WITH(trace::read_iterations_csv(dir.file("missing.csv")), Contains("cannot open"));
}

TEST_CASE("transitions JSON: exact round trip, sorted keys, byte-identical rewrite", "[traces]") {
  test::TempDir dir;
  const std::vector<trace::TransitionCost> t = {sample_transition(1), sample_transition(3)};
  const std::string text = transitions_text(t);
  REQUIRE(text.rfind("[\n  {\n    \"K_after\": 2,\n    \"K_before\": 4,\n    \"cache_probe_s\": 0.25,\n    \"epoch\": 1,\n", 0) == 0);
  REQUIRE_THAT(text, Contains("\"total_s\": "));
  put(dir.file("transitions.json"), text);
  const auto back = trace::read_transitions_json(dir.file("transitions.json"));
  REQUIRE(back == t);
  REQUIRE(transitions_text(back) == text);
  REQUIRE(transitions_text({}) == "[]\n");
  // Files from before the cache probe had a part of its own (it was in
  // planning_s) read with a probe of 0; from before the first batch was
  // recorded, with none prefetched and no wait.
  trace::TransitionCost old = sample_transition(1);
  old.cache_probe_s = 0;
  old.first_batch_prefetched = false;
  old.first_batch_wait_s = 0;
  put(dir.file("old.json"), edit(edit(edit(transitions_text({old}), "\"cache_probe_s\": 0.0,", ""),
                                      "\"first_batch_prefetched\": false,", ""),
                                 "\"first_batch_wait_s\": 0.0,", ""));
  CHECK(trace::read_transitions_json(dir.file("old.json")) == std::vector<trace::TransitionCost>{old});
}

TEST_CASE("transitions JSON: malformed files name the file, the transition and the key", "[traces]") {
  test::TempDir dir;
  const std::string path = dir.file("transitions.json");
  const std::string good = transitions_text({sample_transition(1)});
  const auto fails = refusals(path, [](const std::string& p) { return trace::read_transitions_json(p); });
  fails("{}", path + ": expected a JSON array");
  fails("[", path + ": not valid JSON");
  fails(edit(good, "\"K_after\": 2,", ""), path + ": transition 0: missing field 'K_after'");
  fails(edit(good, "\"K_after\": 2,", "\"K_after\": 2, \"extra\": 1,"), path + ": transition 0: unknown field 'extra'");
  fails(edit(good, "\"K_after\": 2,", "\"K_after\": \"two\","),
        path + ": transition 0: field 'K_after': expected an integer in [0, 1073741824], found \"two\"");
  fails(edit(good, "\"warmup_s\": 2.5", "\"warmup_s\": 3.5"), "field 'total_s': expected");
  fails(edit(good, "\"first_batch_prefetched\": true", "\"first_batch_prefetched\": 1"),
        path + ": transition 0: field 'first_batch_prefetched': expected true or false, found 1");
  fails("[1]", path + ": transition 0: expected an object, found 1");
}

TEST_CASE("run state JSON: exact round trip, epochs carry every epoch CSV column", "[traces]") {
  const trace::RunState s = sample_state();
  const std::string text = trace::run_state_json(s);
  REQUIRE_THAT(text, Contains("\"exposed_comm_s\":0.0"));
  REQUIRE_THAT(text, Contains("\"source\":\"exec\""));
  const trace::RunState back = trace::parse_run_state(text, "checkpoint X: progress");
  require_same(s, back);
  REQUIRE(trace::run_state_json(back) == text);
  require_same(trace::parse_run_state(trace::run_state_json({}), "empty"), trace::RunState{});
}

// Checkpoints written before the run state held its steps: the frozen
// count per step and the cache measured per depth become the same steps.
TEST_CASE("run state JSON: a state with frozen_history and cache_measurements reads as its steps", "[traces]") {
  const std::string now = trace::run_state_json(sample_state());
  const std::string steps = R"("steps":[{"frozen":0},{"cache":{"frozen_forward_s":0.004,"read_s":0.001},"frozen":1}])";
  REQUIRE_THAT(now, Contains(steps));
  std::string before = edit(now, steps, R"("frozen_history":[0,1,1])");
  before = edit(before, "\"consumed\"",
                R"("cache_measurements":{"1":{"frozen_forward_s":0.004,"read_s":0.001},"3":{"frozen_forward_s":1.0,"read_s":2.0}},"consumed")");
  const trace::RunState read = trace::parse_run_state(before, "old");
  trace::RunState expected = sample_state();
  expected.steps.push_back(expected.steps.back());  // a third step at depth 1 had probed it too
  require_same(read, expected);
  REQUIRE_THROWS_WITH(trace::parse_run_state(edit(before, "[0,1,1]", "[0,-1,1]"), "old"),
                      Contains("old: field 'frozen_history[1]': expected a non-negative integer, found -1"));
}

TEST_CASE("run state JSON: a per-layer step's layers frozen inside and its reason round-trip, checked", "[traces]") {
  trace::RunState s = sample_state();
  s.steps.push_back({1, std::nullopt, {3, 5}, "layers 0 3 5 (on the slowest stages): 1.0 s to the end"});
  const std::string text = trace::run_state_json(s);
  REQUIRE_THAT(text, Contains(R"({"frozen":1,"inside":[3,5],"set_reason":"layers 0 3 5)"));
  const trace::RunState back = trace::parse_run_state(text, "ck");
  REQUIRE(back.steps.size() == 3);
  CHECK(back.steps[2].frozen_inside == std::vector<int>{3, 5});
  CHECK(back.steps[2].frozen_set_reason == s.steps[2].frozen_set_reason);
  REQUIRE(trace::run_state_json(back) == text);
  REQUIRE_THROWS_WITH(trace::parse_run_state(edit(text, "[3,5]", "[1,5]"), "ck"),
                      Contains("ck: steps[2]: field 'inside[0]': expected ascending layers past the prefix, found 1"));
  REQUIRE_THROWS_WITH(trace::parse_run_state(edit(text, "[3,5]", "[5,3]"), "ck"),
                      Contains("ck: steps[2]: field 'inside[1]'"));
  REQUIRE_THROWS_WITH(trace::parse_run_state(edit(text, "[3,5]", "3"), "ck"), Contains("ck: steps[2]: field 'inside'"));
  REQUIRE_THROWS_WITH(trace::parse_run_state(edit(text, "[3,5]", "[3,5.5]"), "ck"),
                      Contains("ck: steps[2]: field 'inside[1]': expected ascending layers past the prefix, found 5.5"));
  REQUIRE_THROWS_WITH(trace::parse_run_state(edit(text, "[3,5]", "[3,18446744073709551615]"), "ck"),
                      Contains("ck: steps[2]: field 'inside[1]'"));
}

TEST_CASE("run state JSON: malformed states name where, the key, expected and found", "[traces]") {
  const std::string good = trace::run_state_json(sample_state());
  const auto fails = [&](const std::string& text, const std::string& message) {
    REQUIRE_THROWS_WITH(trace::parse_run_state(text, "ck: progress"), Contains(message));
  };
  fails("[]", "ck: progress: expected a JSON object");
  fails("{", "ck: progress: not valid JSON");
  fails(edit(good, "\"consumed\":512,", ""), "ck: progress: missing field 'consumed'");
  fails(edit(good, "\"consumed\":512,", "\"consumed\":512,\"extra\":0,"), "ck: progress: unknown field 'extra'");
  fails(edit(good, "\"consumed\":512", "\"consumed\":-1"), "field 'consumed': expected an integer in [0, ");
  fails(edit(good, "{\"frozen\":0}", "{\"frozen\":\"x\"}"),
        "ck: progress: steps[0]: field 'frozen': expected a non-negative integer, found \"x\"");
  fails(edit(good, "{\"frozen\":0}", "{\"frozen\":0,\"probe\":1}"), "ck: progress: steps[0]: unknown field 'probe'");
  fails(edit(good, "\"4\":[", "\"four\":["), "field 'chunk_times': key 'four': expected a non-negative integer");
  fails(edit(good, "\"read_s\":0.001", "\"read_s\":null"),
        "ck: progress: steps[1]: cache: field 'read_s': expected a number, found null");
  fails(edit(good, "\"K\":4,", ""), "ck: progress: epochs[0]: missing field 'K'");
  fails(edit(good, "\"cache\":false", "\"cache\":0"), "ck: progress: epochs[0]: field 'cache': expected true or false");
  fails(edit(good, "\"source\":\"exec\"", "\"source\":\"gpu\""), "ck: progress: epochs[0]: source 'gpu'");
  fails(edit(good, "\"warmup_s\":2.5", "\"warmup_s\":\"slow\""), "ck: progress: transitions[0]: field 'warmup_s'");
  fails(edit(good, "\"grad_norms\":[[1.0", "\"grad_norms\":[[true"),
        "ck: progress: field 'grad_norms[0][0]': expected a number, found true");
}

TEST_CASE("chunk memo: none when missing, exact round trip, strict reading", "[traces]") {
  test::TempDir dir;
  const std::string path = dir.file("memo.json");
  REQUIRE(trace::read_chunk_memo(path).empty());
  const std::string digest(32, 'a');
  const std::vector<trace::ChunkMemoEntry> entries = {
      {{"host|2 cores|cpu", 1, 128, {1, 2, 3}, digest}, {0.1, 1.0 / 3, 2e-9}},
      {{"host|2 cores|cuda", 2, 64, {2}, "0123456789abcdef0123456789abcdef"}, {0.05}}};
  trace::write_chunk_memo(entries, path);
  const auto back = trace::read_chunk_memo(path);
  REQUIRE(back.size() == 2);
  for (std::size_t i = 0; i < back.size(); ++i) {
    CHECK(back[i].key == entries[i].key);
    CHECK(back[i].iteration_s == entries[i].iteration_s);
  }
  const std::string good = test::slurp(path);
  const auto fails = refusals(path, [](const std::string& p) { return trace::read_chunk_memo(p); });
  fails("[]", path + ": expected a JSON object");
  fails("{", path + ": not valid JSON");
  fails("{\"entries\": {}}", path + ": field 'entries': expected an array, found {}");
  fails("{\"entries\": [1]}", path + ": entries[0]: expected an object, found 1");
  fails("{\"entries\": [], \"x\": 1}", path + ": unknown field 'x'");
  fails(edit(good, "\"K\": 2", "\"K\": 0"), path + ": entries[1].key: field 'K': expected an integer in [1, 1024], found 0");
  fails(edit(good, "\"batch\": 64", "\"batch\": \"64\""), path + ": entries[1].key: field 'batch'");
  fails(edit(good, "\"environment\": \"host|2 cores|cuda\",", ""), path + ": entries[1].key: missing field 'environment'");
  fails(edit(good, "0.05", "0.05, 0.06"), path + ": entries[1]: field 'iteration_s': expected one time per M (1), found [0.05,0.06]");
  fails(edit(good, "0.05", "-1"), path + ": entries[1]: field 'iteration_s[0]': expected a positive number of seconds, found -1");
  fails(edit(good, "0.05", "null"), "expected a positive number of seconds, found null");
  fails(edit(good, "\"format\": \"elasticpipe.chunk_memo/2\"", "\"format\": \"elasticpipe.chunk_memo/9\""),
        path + ": field 'format': expected \"elasticpipe.chunk_memo/2\", found \"elasticpipe.chunk_memo/9\"");
  fails(edit(good, "\"0123456789abcdef0123456789abcdef\"", "\"0123\""),
        path + ": entries[1].key: field 'programs': expected 32 hex digits, found \"0123\"");
  fails(edit(good, ",\n    \"programs\": \"0123456789abcdef0123456789abcdef\"", ""),
        path + ": entries[1].key: missing field 'programs'");
  // The first format (no `format`, keys without programs): read as
  // strictly, and none of its entries used.
  const std::string first = R"({"entries": [{"key": {"environment": "h", "K": 1, "batch": 8, "M": [1, 2]},
    "iteration_s": [0.1, 0.2]}]})";
  put(path, first);
  CHECK(trace::read_chunk_memo(path).empty());
  fails(edit(first, "\"K\": 1", "\"K\": 0"), path + ": entries[0].key: field 'K': expected an integer in [1, 1024]");
  fails(edit(first, "\"M\"", "\"programs\": \"x\", \"M\""), path + ": entries[0].key: unknown field 'programs'");
}

TEST_CASE("plan JSON reader: the fields a run's readers rely on, checked strictly", "[traces]") {
  test::TempDir dir;
  const std::string path = dir.file("plan.json");
  const std::string good = R"({"schema": "elasticpipe.plan/1", "config": "c.toml", "cost_model": "analytic",
    "L": 4, "K0": 4, "objective": "time", "plans": [
    {"id": 0, "freeze_step": 0, "epochs": [0, 2], "frozen_layers": 0, "K": 4, "M": 8, "replicas": 1,
     "cache": {"on": false, "tier": "host"}, "iteration_s": 0.5, "more": "planner fields"},
    {"id": 1, "freeze_step": 1, "epochs": [2, 4], "frozen_layers": 2, "K": 2, "M": 4, "replicas": 2,
     "cache": {"on": true}, "iteration_s": 0.25}]})";
  put(path, good);
  const trace::PlanFile f = trace::read_plan_json(path);
  REQUIRE(f.config == "c.toml");
  REQUIRE(f.cost_model == "analytic");
  REQUIRE(f.objective == "time");
  REQUIRE(f.L == 4);
  REQUIRE(f.plans.size() == 2);
  REQUIRE(f.plans[1].first_epoch == 2);
  REQUIRE(f.plans[1].end_epoch == 4);
  REQUIRE(f.plans[1].frozen_layers == 2);
  REQUIRE(f.plans[1].K == 2);
  REQUIRE(f.plans[1].replicas == 2);
  REQUIRE(f.plans[1].cache);
  REQUIRE(f.plans[1].iteration_s == 0.25);
  const auto fails = refusals(path, [](const std::string& p) { return trace::read_plan_json(p); });
  REQUIRE(f.plans[1].frozen_inside.empty());  // a plan/1 file: prefix freezing
  // plan/2 adds the layers frozen past the prefix (decision 0037).
  put(path, edit(edit(good, "elasticpipe.plan/1", "elasticpipe.plan/2"), "\"frozen_layers\": 2,",
                 "\"frozen_layers\": 2, \"frozen_inside\": [3, 5],"));
  REQUIRE(trace::read_plan_json(path).plans[1].frozen_inside == std::vector<int>{3, 5});
  fails(edit(good, "elasticpipe.plan/1", "elasticpipe.plan/3"),
        path + ": field 'schema': expected \"elasticpipe.plan/2\" or \"elasticpipe.plan/1\", found \"elasticpipe.plan/3\"");
  fails(edit(good, "\"frozen_layers\": 2,", "\"frozen_layers\": 2, \"frozen_inside\": [2],"),
        path + ": plans[1]: field 'frozen_inside[0]': expected ascending layers past the prefix");
  fails(edit(good, "\"frozen_layers\": 2,", "\"frozen_layers\": 2, \"frozen_inside\": [5, 3],"),
        path + ": plans[1]: field 'frozen_inside[1]': expected ascending layers past the prefix");
  fails(edit(good, "\"K\": 2,", "\"K\": 0,"), path + ": plans[1]: field 'K': expected an integer in [1, ");
  fails(edit(good, "\"epochs\": [2, 4]", "\"epochs\": [4, 2]"), path + ": plans[1]: field 'epochs': expected [first, end]");
  fails(edit(good, "\"cache\": {\"on\": true}", "\"cache\": {}"), path + ": plans[1]: cache: missing field 'on'");
  fails(edit(good, "\"L\": 4,", ""), path + ": missing field 'L'");
}
