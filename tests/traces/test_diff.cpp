// trace diff: alignment by (plan, replica, action) and per-kind error.
#include <catch2/catch.hpp>

#include "traces/diff.hpp"

using namespace ep::trace;

namespace {

// Two replicas, `iterations` iterations of F and B on one GPU each, plus a
// link span that diff must ignore.
Trace run(int iterations, double forward_s) {
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
        e.end_s = clock += name[1] == 'F' ? forward_s : 2e-3;
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
  REQUIRE(d.categories.size() == 2);  // forward, backward; the link span is left out
  CHECK(d.total.matched == 4);        // 2 actions x 2 replicas
  CHECK(d.total.mape == 0);
  CHECK(d.total.only_first == 0);
}

TEST_CASE("diff aligns runs with different iteration counts and measures per kind", "[traces][diff]") {
  // One traced iteration (a simulation) against five (a real run), forward 10% off.
  const TraceDiff d = diff_traces(run(1, 1.1e-3), run(5, 1e-3));
  REQUIRE(d.categories.size() == 2);
  CHECK(d.categories[0].category == "forward");
  CHECK(d.categories[0].matched == 2);
  CHECK(d.categories[0].mape == Approx(0.10));
  CHECK(d.categories[0].mean_abs_error_s == Approx(1e-4));
  CHECK(d.categories[1].category == "backward");
  CHECK(d.categories[1].mape == 0);
  CHECK(d.total.mape == Approx(0.05));
}

TEST_CASE("diff refuses traces with nothing to compare instead of reporting no error", "[traces][diff]") {
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(diff_traces(run(1, 1e-3), Trace{}), Contains("the second trace has no GPU spans"));
  CHECK_THROWS_WITH(diff_traces(Trace{}, run(1, 1e-3)), Contains("the first trace has no GPU spans"));
  Trace vit = run(1, 1e-3), bert = run(1, 1e-3);
  vit.metadata["model"] = "vit L=12";
  bert.metadata["model"] = "bert L=24";
  CHECK_THROWS_WITH(diff_traces(vit, bert), Contains("different models") && Contains("'vit L=12'") &&
                                                 Contains("'bert L=24'"));
  bert.metadata["model"] = "vit L=12";
  CHECK_NOTHROW(diff_traces(vit, bert));
  Trace other = run(1, 1e-3);
  for (Event& e : other.events) e.plan_id = 7;  // another run's plans: nothing in common
  CHECK_THROWS_WITH(diff_traces(run(1, 1e-3), other), Contains("no action of the first trace matches"));
}
