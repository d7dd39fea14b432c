// [sim], read by the simulator itself (sim/sim_config.hpp): its keys and
// ranges, an unknown key or collective model refused with file:line, and
// the planner leaving the section alone.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

#include "sim/sim_config.hpp"
#include "tests/planner/support.hpp"

using namespace ep;

namespace {

// configs/small/tiny_bert_synthetic.toml, which has no [sim], with `sim`
// appended as its [sim] section.
std::string with_sim(const std::string& sim) {
  std::ifstream in(test::repo_path("configs/small/tiny_bert_synthetic.toml"));
  std::stringstream text;
  text << in.rdbuf() << "\n[sim]\n" << sim << "\n";
  return text.str();
}

int line_of(const std::string& text, const std::string& needle) {
  const auto pos = text.find(needle);
  REQUIRE(pos != std::string::npos);
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + pos, '\n'));
}

// The error reading [sim] gives; empty where it reads.
std::string sim_error(const std::string& text) {
  const Config c = parse_config(text, "test.toml");  // the planner's sections read
  return test::error_of([&] { (void)sim::read_sim_config(c); });
}

}  // namespace

TEST_CASE("[sim] is read by the simulator: its values, defaults and ranges", "[sim][config]") {
  const sim::SimConfig d = sim::read_sim_config(test::tiny_bert());
  CHECK(d.collectives == "steps");
  CHECK(d.warmup_iterations == 1);
  CHECK(d.measure_iterations == 2);
  CHECK(d.trace);
  const sim::SimConfig s = sim::read_sim_config(
      parse_config(with_sim("collectives = \"phases\"\nwarmup_iterations = 3\nmeasure_iterations = 4\ntrace = false"),
                   "test.toml"));
  CHECK(s.collectives == "phases");
  CHECK(s.warmup_iterations == 3);
  CHECK(s.measure_iterations == 4);
  CHECK_FALSE(s.trace);
}

TEST_CASE("a bad [sim] key is refused naming file:line, the key, expected and found", "[sim][config]") {
  const auto check = [](const std::string& sim, const std::string& key, const std::string& found) {
    const std::string text = with_sim(sim);
    const std::string msg = sim_error(text);
    CAPTURE(msg);
    CHECK(msg.rfind("test.toml:" + std::to_string(line_of(text, sim)) + ":", 0) == 0);
    CHECK(msg.find("key '" + key + "'") != std::string::npos);
    CHECK(msg.find(found) != std::string::npos);
  };
  // The period must be seen to repeat.
  check("measure_iterations = 1", "sim.measure_iterations", "1");
  check("collectives = \"tree\"", "sim.collectives", "expected one of steps|phases|analytic");
  check("trace = 1", "sim.trace", "integer 1");
  check("warmup_iteratons = 2", "sim.warmup_iteratons", "did you mean sim.warmup_iterations?");
  // Where transition costs were a simulator knob, the key names where it went.
  check("context_creation_s = 2", "sim.context_creation_s", "expected cluster.transition.context_creation_s");
  // A --set names itself.
  const std::string msg =
      test::error_of([] { (void)sim::read_sim_config(test::tiny_bert({"sim.measure_iterations=1"})); });
  CHECK(msg.rfind("--set sim.measure_iterations: key 'sim.measure_iterations'", 0) == 0);
}

TEST_CASE("the planner leaves [sim] to the simulator, and still refuses an unknown section", "[sim][config]") {
  CHECK_NOTHROW(parse_config(with_sim("collectives = \"tree\""), "test.toml"));
  const std::string msg = test::error_of([] { (void)test::tiny_bert({"simulator.trace=false"}); });
  CHECK(msg.find("expected a section cluster|data|exec|model|planner|sim|training") != std::string::npos);
}
