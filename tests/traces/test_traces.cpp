// Trace I/O: round trips over random traces, metrics and summaries; the
// Chrome JSON's structure as Perfetto reads it; malformed files.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <tuple>

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

// Names that stress escaping: quotes, backslashes, control characters, UTF-8.
const std::vector<std::string> kNames = {"2F0",
                                         "1SEND_F3>2",
                                         "0AR1",
                                         "transition K 8->4",
                                         "say \"hi\"\\",
                                         "tab\there\nnewline",
                                         "K 8 \xE2\x86\x92 4 \xC3\xBC",
                                         ""};

Trace random_trace(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  Trace t;
  t.source = chance(0.5) ? "sim" : "exec";
  t.config = "configs/paper/vit_imagenet.toml";
  t.mode = kNames[uniform(0, static_cast<int>(kNames.size()) - 1)];
  for (int i = 0, n = uniform(0, 4); i < n; ++i)
    t.metadata["key" + std::to_string(i)] = kNames[uniform(0, 7)];

  // Tracks in a random order, so tid order and sort order differ.
  std::vector<Track> tracks;
  const int nodes = uniform(1, 3), gpus = uniform(1, 4);
  for (int n = 0; n < nodes; ++n) {
    for (int g = 0; g < gpus; ++g) {
      tracks.push_back({TrackKind::Gpu, n, g, "gpu" + std::to_string(g)});
      if (chance(0.5)) tracks.push_back({TrackKind::Gpu, n, g, "gpu" + std::to_string(g) + " #1", 1});
    }
    tracks.push_back({TrackKind::Link, n, 0, "pcie" + std::to_string(n) + ".up"});
  }
  if (nodes > 1) tracks.push_back({TrackKind::Link, -1, 0, "ib0.down"});
  std::shuffle(tracks.begin(), tracks.end(), rng);
  for (const Track& tr : tracks) t.track(tr);

  const int n_events = uniform(0, 400);
  std::exponential_distribution<double> dur(10.0);
  for (int i = 0; i < n_events; ++i) {
    Event e;
    e.track = uniform(0, static_cast<int>(t.tracks.size()) - 1);
    e.name = kNames[uniform(0, static_cast<int>(kNames.size()) - 1)];
    e.category = std::string(kEventCategories[uniform(0, static_cast<int>(kEventCategories.size()) - 1)]);
    e.start_s = std::uniform_real_distribution<double>(0, 30000)(rng);
    e.end_s = chance(0.1) ? e.start_s : e.start_s + dur(rng);
    for (int* f : {&e.stage, &e.microbatch, &e.bucket, &e.replica, &e.plan_id, &e.iteration})
      *f = chance(0.5) ? -1 : uniform(0, 2000);
    e.bytes = chance(0.5) ? -1 : std::uniform_int_distribution<std::int64_t>(0, std::int64_t{1} << 45)(rng);
    t.events.push_back(e);
  }
  // Spans of a track must nest or be disjoint (Perfetto drops partial
  // overlaps, so the writer refuses them): lay each track's spans out one
  // after another, in start order, keeping their durations.
  std::vector<std::size_t> order(t.events.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return std::pair(t.events[a].track, t.events[a].start_s) < std::pair(t.events[b].track, t.events[b].start_s);
  });
  for (std::size_t k = 1; k < order.size(); ++k) {
    const Event& prev = t.events[order[k - 1]];
    Event& e = t.events[order[k]];
    if (prev.track != e.track || e.start_s >= prev.end_s) continue;
    const double d = e.end_s - e.start_s;
    e.start_s = prev.end_s;
    e.end_s = e.start_s + d;
  }
  for (auto& e : t.events) e.epoch = chance(0.5) ? -1 : uniform(0, 100);
  // Flows: each event starts and ends at most one; an event may do both.
  std::int64_t next_id = uniform(1, 1000);
  for (auto& e : t.events) {
    Event& to = t.events[uniform(0, n_events - 1)];
    if (e.flow_out == 0 && to.flow_in == 0 && chance(0.4)) e.flow_out = to.flow_in = next_id++;
  }
  return t;
}

// Times equal within `tolerance_s` (a nanosecond: the trace's resolution).
void require_same(const Trace& a, const Trace& b, double tolerance_s = 1e-9) {
  REQUIRE(a.source == b.source);
  REQUIRE(a.config == b.config);
  REQUIRE(a.mode == b.mode);
  REQUIRE(a.metadata == b.metadata);
  REQUIRE(a.tracks == b.tracks);
  REQUIRE(a.events.size() == b.events.size());
  for (std::size_t i = 0; i < a.events.size(); ++i) {
    const Event &x = a.events[i], &y = b.events[i];
    INFO("event " << i);
    CHECK(x.track == y.track);
    CHECK(x.name == y.name);
    CHECK(x.category == y.category);
    CHECK(std::abs(x.start_s - y.start_s) <= tolerance_s);
    CHECK(std::abs(x.end_s - y.end_s) <= tolerance_s);
    CHECK(std::tie(x.stage, x.microbatch, x.bucket, x.replica, x.plan_id, x.iteration, x.bytes, x.flow_out,
                   x.flow_in) == std::tie(y.stage, y.microbatch, y.bucket, y.replica, y.plan_id, y.iteration,
                                          y.bytes, y.flow_out, y.flow_in));
  }
}

// Two GPUs of node 0 and a network link; a send on gpu0 flows to a recv on gpu1.
Trace small_trace() {
  Trace t;
  t.source = "sim";
  t.config = "configs/small/tiny_bert_synthetic.toml";
  t.mode = "autopipe";
  const int g0 = t.track({TrackKind::Gpu, 0, 0, "gpu0"}), g1 = t.track({TrackKind::Gpu, 0, 1, "gpu1"});
  const int ib = t.track({TrackKind::Link, -1, 0, "ib0.down"});
  Event f{.track = g0,
          .name = "0F0",
          .category = "forward",
          .start_s = 0,
          .end_s = 0.25,
          .stage = 0,
          .microbatch = 0};
  Event send{.track = g0,
             .name = "0SEND_F0>1",
             .category = "send",
             .start_s = 0.25,
             .end_s = 0.5,
             .bytes = 4096,
             .flow_out = 1};
  Event recv{.track = g1,
             .name = "1RECV_F0<0",
             .category = "recv",
             .start_s = 0.25,
             .end_s = 0.5,
             .bytes = 4096,
             .flow_in = 1};
  Event ar{.track = ib, .name = "0AR1", .category = "allreduce", .start_s = 1, .end_s = 1.5, .bucket = 1};
  t.events = {f, send, recv, ar};
  return t;
}

// Write small_trace(), edit its JSON, and write that to a new file.
std::string edited_trace(const TempDir& dir, const std::function<void(json&)>& edit) {
  const std::string good = dir.file("good.json"), bad = dir.file("bad.json");
  write_chrome_trace(small_trace(), good);
  json doc = json::parse(slurp(good));
  edit(doc);
  spit(bad, doc.dump());
  return bad;
}

// Index in traceEvents of the first event with this ph (and name, when given).
std::size_t find_event(const json& doc, const std::string& ph, const std::string& name = "") {
  const json& evs = doc["traceEvents"];
  for (std::size_t i = 0; i < evs.size(); ++i)
    if (evs[i]["ph"] == ph && (name.empty() || evs[i]["name"] == name)) return i;
  FAIL("no event with ph " << ph);
  return 0;
}

}  // namespace

TEST_CASE("chrome trace: write -> read gives the trace back, write -> read -> write the same bytes",
          "[traces]") {
  TempDir dir;
  for (std::uint64_t seed = 1; seed <= 25; ++seed) {
    INFO("seed " << seed);
    const Trace t = random_trace(seed);
    write_chrome_trace(t, dir.file("a.json"));
    const Trace back = read_chrome_trace(dir.file("a.json"));
    require_same(t, back);
    write_chrome_trace(back, dir.file("b.json"));
    REQUIRE(slurp(dir.file("a.json")) == slurp(dir.file("b.json")));
    // Through memory, as one process sends its trace to another.
    std::ostringstream out;
    write_chrome_trace(t, out, "sent");
    REQUIRE(out.str() == slurp(dir.file("a.json")));
    std::istringstream in(out.str());
    require_same(t, read_chrome_trace(in, "rank 1's trace"));
  }
}

TEST_CASE("chrome trace: a stream is checked as a file is, errors naming the stream", "[traces]") {
  std::istringstream cut("{\"traceEvents\": [");
  require_error([&] { read_chrome_trace(cut, "rank 3's trace"); }, {"rank 3's trace", "not valid JSON"});
  std::istringstream array("[1, 2]");
  require_error([&] { read_chrome_trace(array, "rank 3's trace"); }, {"rank 3's trace", "a JSON object"});
}

TEST_CASE("chrome trace: times keep nanoseconds, also far into a run", "[traces]") {
  TempDir dir;
  Trace t = small_trace();
  t.events[0].start_s = 12345.678901234567;
  t.events[0].end_s = 99999.999999999;
  t.events[1].start_s = -0.5e-9;  // rounds to the nanosecond, not further
  t.events[1].end_s = 1e-9;
  write_chrome_trace(t, dir.file("t.json"));
  const Trace back = read_chrome_trace(dir.file("t.json"));
  require_same(t, back);
  CHECK(back.events[0].end_s == 99999.999999999);
}

TEST_CASE("chrome trace: rewriting is byte-identical over the whole time range", "[traces]") {
  // Within 92 days every nanosecond survives and rewriting gives the same
  // bytes; up to the limit (1e9 s, 31.7 years: a simulated training of
  // months or years) a round trip moves a time by at most 128 ns and
  // nesting survives (the rewrite would refuse a partial overlap).
  for (const double range : {1e6, 4e6, 1e8, 1e9}) {
    INFO("times within +-" << range << " s");
    TempDir dir;
    Trace t = random_trace(3);
    REQUIRE(!t.events.empty());
    std::mt19937_64 rng(3);
    // Disjoint spans spread over the whole range (sorted random cut points),
    // and one span over all of it, which the others nest in.
    std::uniform_real_distribution<double> time(-range, range);
    std::vector<double> cuts(2 * t.events.size());
    for (double& c : cuts) c = time(rng);
    std::sort(cuts.begin(), cuts.end());
    // A span lasts at most 92 days.
    for (std::size_t i = 0; i < t.events.size(); ++i)
      t.events[i].start_s = cuts[2 * i], t.events[i].end_s = std::min(cuts[2 * i + 1], cuts[2 * i] + 1e6);
    if (range <= 4e6) t.events.front().start_s = -range, t.events.front().end_s = range;
    write_chrome_trace(t, dir.file("a.json"));
    const Trace back = read_chrome_trace(dir.file("a.json"));
    require_same(t, back, range <= 4e6 ? 1e-9 : 128e-9);
    write_chrome_trace(back, dir.file("b.json"));
    if (range <= 4e6) REQUIRE(slurp(dir.file("a.json")) == slurp(dir.file("b.json")));
    require_same(back, read_chrome_trace(dir.file("b.json")), range <= 4e6 ? 0 : 128e-9);
  }
}

TEST_CASE("chrome trace: an empty trace round-trips", "[traces]") {
  TempDir dir;
  Trace t;
  t.source = "exec";
  write_chrome_trace(t, dir.file("e.json"));
  require_same(t, read_chrome_trace(dir.file("e.json")));
}

TEST_CASE("chrome trace: the file is the JSON Object Format Perfetto opens", "[traces]") {
  TempDir dir;
  for (std::uint64_t seed = 100; seed < 110; ++seed) {
    const Trace t = random_trace(seed);
    write_chrome_trace(t, dir.file("s.json"));
    const json doc = json::parse(slurp(dir.file("s.json")));
    REQUIRE(doc["displayTimeUnit"] == "ms");
    REQUIRE(doc["otherData"]["schema"] == kSchemaVersion);
    REQUIRE(doc["otherData"]["source"] == t.source);

    std::set<long> named_pids;
    std::set<std::pair<long, long>> named_threads, used_threads;
    std::map<std::pair<long, long>, int> sort_index;
    std::map<long, std::pair<int, int>> flow_ends;  // id -> (starts, ends)
    std::map<std::pair<long, long>, std::vector<std::pair<double, double>>> slices;
    int x_events = 0;
    for (const json& ev : doc["traceEvents"]) {
      for (const char* key : {"ph", "pid", "tid", "ts"}) REQUIRE(ev.contains(key));
      REQUIRE(ev["pid"].get<long>() >= 1);  // Perfetto treats pid 0 as special
      const auto thread = std::pair(ev["pid"].get<long>(), ev["tid"].get<long>());
      const std::string ph = ev["ph"];
      if (ph == "M") {
        if (ev["name"] == "process_name") named_pids.insert(thread.first);
        if (ev["name"] == "thread_name") named_threads.insert(thread);
        if (ev["name"] == "thread_sort_index") sort_index[thread] = ev["args"]["sort_index"];
        continue;
      }
      used_threads.insert(thread);
      if (ph == "X") {
        ++x_events;
        REQUIRE(ev["dur"].get<double>() >= 0);
        for (const char* key : {"name", "cat", "args"}) REQUIRE(ev.contains(key));
        REQUIRE(ev["args"]["action"] == ev["name"]);
        for (const auto& [k, v] : ev["args"].items()) REQUIRE(v != -1);
        slices[thread].emplace_back(ev["ts"].get<double>(), ev["ts"].get<double>() + ev["dur"].get<double>());
      } else {
        REQUIRE((ph == "s" || ph == "f"));
        const long id = ev["id"];
        ++(ph == "s" ? flow_ends[id].first : flow_ends[id].second);
        if (ph == "f") REQUIRE(ev["bp"] == "e");
        // Bound to an enclosing slice of the same thread.
        const double ts = ev["ts"];
        const auto& s = slices[thread];
        REQUIRE(std::any_of(s.begin(), s.end(),
                            [&](const auto& sl) { return sl.first <= ts && ts <= sl.second; }));
      }
    }
    REQUIRE(x_events == static_cast<int>(t.events.size()));
    REQUIRE(named_threads.size() == t.tracks.size());
    for (const auto& th : used_threads) {
      REQUIRE(named_pids.count(th.first) == 1);
      REQUIRE(named_threads.count(th) == 1);
    }
    for (const auto& [id, n] : flow_ends) REQUIRE(n == std::pair(1, 1));
    // GPU threads sort before link threads.
    for (std::size_t a = 0; a < t.tracks.size(); ++a)
      for (std::size_t b = 0; b < t.tracks.size(); ++b)
        if (t.tracks[a].kind == TrackKind::Gpu && t.tracks[b].kind == TrackKind::Link) {
          const auto ta = *std::find_if(named_threads.begin(), named_threads.end(), [&](const auto& th) {
            return th.second == static_cast<long>(a) + 1;
          });
          const auto tb = *std::find_if(named_threads.begin(), named_threads.end(), [&](const auto& th) {
            return th.second == static_cast<long>(b) + 1;
          });
          REQUIRE(sort_index[ta] < sort_index[tb]);
        }
  }
}

TEST_CASE("chrome trace: malformed files give an ep::Error naming the file and the event", "[traces]") {
  TempDir dir;
  SECTION("not JSON") {
    spit(dir.file("x.json"), "{\"traceEvents\": [");
    require_error([&] { read_chrome_trace(dir.file("x.json")); }, {dir.file("x.json"), "not valid JSON"});
  }
  SECTION("a missing file") {
    require_error([&] { read_chrome_trace(dir.file("none.json")); }, {dir.file("none.json"), "cannot open"});
  }
  SECTION("wrong schema version") {  // a file of an older elasticpipe names the version it has
    const auto bad = edited_trace(dir, [](json& d) { d["otherData"]["schema"] = "elasticpipe.trace/1"; });
    require_error([&] { read_chrome_trace(bad); }, {bad, "otherData", "'schema'", "elasticpipe.trace/1"});
  }
  SECTION("an X event without dur") {
    std::size_t i = 0;
    const auto bad =
        edited_trace(dir, [&](json& d) { d["traceEvents"][i = find_event(d, "X")].erase("dur"); });
    require_error([&] { read_chrome_trace(bad); },
                  {bad, "traceEvents[" + std::to_string(i) + "]", "missing field 'dur'"});
  }
  SECTION("a negative dur") {
    std::size_t i = 0;
    const auto bad =
        edited_trace(dir, [&](json& d) { d["traceEvents"][i = find_event(d, "X")]["dur"] = -5; });
    require_error([&] { read_chrome_trace(bad); }, {"traceEvents[" + std::to_string(i) + "]", "'dur'", "-5"});
  }
  SECTION("a ts of the wrong type") {
    const auto bad = edited_trace(dir, [&](json& d) { d["traceEvents"][find_event(d, "X")]["ts"] = "0"; });
    require_error([&] { read_chrome_trace(bad); }, {"'ts'", "expected a number"});
  }
  SECTION("a flow start without its end") {
    std::size_t s = 0;
    const auto bad = edited_trace(dir, [&](json& d) {
      s = find_event(d, "s");
      d["traceEvents"].erase(find_event(d, "f"));
    });
    require_error([&] { read_chrome_trace(bad); },
                  {"traceEvents[" + std::to_string(s) + "]", "flow id 1 starts here but never ends"});
  }
  SECTION("a flow end twice") {
    const auto bad = edited_trace(dir, [&](json& d) {
      auto& evs = d["traceEvents"];
      const std::size_t f = find_event(d, "f");
      evs.insert(evs.begin() + static_cast<long>(f) + 1, evs[f]);
    });
    require_error([&] { read_chrome_trace(bad); }, {"flow end"});
  }
  SECTION("a flow event outside its slice") {
    const auto bad = edited_trace(dir, [&](json& d) { d["traceEvents"][find_event(d, "s")]["ts"] = 1e6; });
    require_error([&] { read_chrome_trace(bad); }, {"not inside the X event"});
  }
  SECTION("an unknown ph") {
    const auto bad = edited_trace(dir, [&](json& d) { d["traceEvents"][find_event(d, "X")]["ph"] = "B"; });
    require_error([&] { read_chrome_trace(bad); }, {"'ph'", "one of X, M, s, f", "\"B\""});
  }
  SECTION("an unknown category") {
    const auto bad = edited_trace(dir, [&](json& d) { d["traceEvents"][find_event(d, "X")]["cat"] = "gpu"; });
    require_error([&] { read_chrome_trace(bad); }, {"'cat'", "forward"});
  }
  SECTION("a thread without thread_name") {
    const auto bad = edited_trace(dir, [&](json& d) { d["traceEvents"][find_event(d, "X")]["tid"] = 99; });
    require_error([&] { read_chrome_trace(bad); }, {"tid 99 has no thread_name metadata"});
  }
  SECTION("a process without process_name") {
    const auto bad =
        edited_trace(dir, [&](json& d) { d["traceEvents"].erase(find_event(d, "M", "process_name")); });
    require_error([&] { read_chrome_trace(bad); }, {"has no process_name metadata"});
  }
  SECTION("an arg of the wrong type") {
    const auto bad =
        edited_trace(dir, [&](json& d) { d["traceEvents"][find_event(d, "X")]["args"]["stage"] = 1.5; });
    require_error([&] { read_chrome_trace(bad); }, {"args", "'stage'", "an integer"});
  }
  SECTION("an unknown arg") {
    const auto bad =
        edited_trace(dir, [&](json& d) { d["traceEvents"][find_event(d, "X")]["args"]["stag"] = 1; });
    require_error([&] { read_chrome_trace(bad); }, {"unknown field 'stag'"});
  }
  SECTION("traceEvents not an array") {
    const auto bad = edited_trace(dir, [&](json& d) { d["traceEvents"] = 3; });
    require_error([&] { read_chrome_trace(bad); }, {"'traceEvents'", "an array"});
  }
}

TEST_CASE("chrome trace: damaged files give an ep::Error, never a crash", "[traces]") {
  TempDir dir;
  write_chrome_trace(random_trace(5), dir.file("good.json"));
  const auto read = [](const std::string& p) { return read_chrome_trace(p); };  // the file overload
  survives_damage(dir.file("good.json"), dir.file("bad.json"), read, true);
}

TEST_CASE("chrome trace: the writer rejects a malformed trace", "[traces]") {
  TempDir dir;
  const std::string out = dir.file("w.json");
  Trace t = small_trace();
  SECTION("end before start") {
    t.events[2].end_s = 0.1;
    require_error([&] { write_chrome_trace(t, out); }, {out, "event 2 ('1RECV_F0<0')", "end_s < start_s"});
  }
  SECTION("a track out of range") {
    t.events[0].track = 7;
    require_error([&] { write_chrome_trace(t, out); }, {"event 0", "track 7 out of range"});
  }
  SECTION("an unknown category") {
    t.events[0].category = "fwd";
    require_error([&] { write_chrome_trace(t, out); }, {"category 'fwd'"});
  }
  SECTION("a time that is not finite") {
    t.events[0].end_s = std::nan("");
    require_error([&] { write_chrome_trace(t, out); }, {"end_s"});
  }
  SECTION("a span longer than 92 days") {
    t.events[0].end_s = 9e6;
    require_error([&] { write_chrome_trace(t, out); }, {"event 0", "lasts 9000000 s, expected at most 8e6 s"});
  }
  SECTION("a time beyond 31.7 years") {
    t.events[0].end_s = 2e9;
    require_error([&] { write_chrome_trace(t, out); }, {"end_s = 2000000000", "expected a time in [-1e9, 1e9] s"});
  }
  SECTION("a flow without its end") {
    t.events[2].flow_in = 0;
    require_error([&] { write_chrome_trace(t, out); }, {"event 1", "flow id 1 starts here but never ends"});
  }
  SECTION("a GPU outside any node") {
    t.tracks[0].node = -1;
    require_error([&] { write_chrome_trace(t, out); }, {"track 'gpu0'"});
  }
  SECTION("a bad source") {
    t.source = "real";
    require_error([&] { write_chrome_trace(t, out); }, {"source 'real'"});
  }
  SECTION("a name that is not UTF-8") {
    t.events[3].name = "\xFF";
    require_error([&] { write_chrome_trace(t, out); }, {out, "event 3"});
  }
}

TEST_CASE("chrome trace: partly overlapping spans on a track are refused, separate_overlaps fixes them", "[traces]") {
  TempDir dir;
  Trace t;
  t.source = "sim";
  const int gpu = t.track({TrackKind::Gpu, 0, 0, "gpu0"});
  const int link = t.track({TrackKind::Link, 0, 0, "pcie0.up"});
  const auto span = [&](int track, const char* name, const char* cat, double a, double b) {
    Event e;
    e.track = track;
    e.name = name;
    e.category = cat;
    e.start_s = a;
    e.end_s = b;
    t.events.push_back(e);
  };
  span(gpu, "0F0", "forward", 0, 2);
  span(gpu, "0SEND_F0>1", "send", 1.5, 3);  // an asynchronous send overlapping the next forward
  span(gpu, "0F1", "forward", 2, 4);
  span(gpu, "0AR0", "allreduce", 2.5, 5);
  span(link, "a", "send", 0, 2);
  span(link, "b", "send", 1, 3);  // two concurrent transfers on one link
  span(link, "c", "send", 2, 4);
  span(gpu, "transition", "transition", 10, 12);
  span(gpu, "ddp", "transition", 10, 11);  // nested: fine
  span(gpu, "warmup", "transition", 11, 12);  // nested too, after the part before it
  span(gpu, "0AR9", "allreduce", 11.5, 13);  // inside a part when it starts, outliving it: not nested
  CHECK_THROWS_WITH(write_chrome_trace(t, dir.file("bad.json")), Catch::Contains("partly overlaps"));
  separate_overlaps(t);
  write_chrome_trace(t, dir.file("good.json"));
  const Trace back = read_chrome_trace(dir.file("good.json"));
  // The device's own spans keep lane 0; the send takes lane 1 and the
  // all-reduce, overlapping it, lane 2; the link's "b" takes lane 1, "c" lane 0.
  const auto lane_of = [&](const char* name) {
    for (const auto& e : back.events)
      if (e.name == name) return back.tracks[e.track].lane;
    return -1;
  };
  CHECK(lane_of("0F0") == 0);
  CHECK(lane_of("0F1") == 0);
  CHECK(lane_of("0SEND_F0>1") == 1);
  CHECK(lane_of("0AR0") == 2);
  CHECK(lane_of("a") == 0);
  CHECK(lane_of("b") == 1);
  CHECK(lane_of("c") == 0);
  CHECK(lane_of("transition") == 1);
  CHECK(lane_of("ddp") == 1);  // a transition's parts stay on its track (plots/transition_table.py reads them there)
  CHECK(lane_of("warmup") == 1);
  CHECK(lane_of("0AR9") == 2);
}

TEST_CASE("append puts separately traced runs on one timeline with unique flows", "[traces]") {
  const auto run = [](const char* gpu_name) {
    Trace t;
    t.source = "sim";
    const int gpu = t.track({TrackKind::Gpu, 0, 0, gpu_name});
    Event send;
    send.track = gpu;
    send.name = "0SEND_F0>1";
    send.category = "send";
    send.start_s = 1;
    send.end_s = 2;
    send.flow_out = 1;
    Event recv = send;
    recv.name = "1RECV_F0<0";
    recv.category = "recv";
    recv.flow_out = 0;
    recv.flow_in = 1;
    t.events = {send, recv};
    return t;
  };
  Trace all;
  all.source = "sim";
  CHECK(append(all, run("gpu0"), 10) == 0);
  CHECK(append(all, run("gpu0"), 20) == 2);
  CHECK(append(all, run("gpu1"), 30) == 4);
  REQUIRE(all.events.size() == 6);
  CHECK(all.tracks.size() == 2);  // gpu0 shared by the first two runs
  CHECK(all.events[2].start_s == 21);
  CHECK(all.events[0].flow_out == 1);
  CHECK(all.events[2].flow_out == 2);
  CHECK(all.events[3].flow_in == 2);
  CHECK(all.events[4].flow_out == 3);
  CHECK(all.events[5].track == 1);
  TempDir dir;
  write_chrome_trace(all, dir.file("all.json"));  // flows pair up
  require_same(all, read_chrome_trace(dir.file("all.json")));
}
