// Chrome trace-event JSON: one process per node, one thread per track, one
// complete event per span, flow arrows from sends to receives
// (traces/SCHEMA.md, "Timeline").
#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <limits>
#include <numeric>
#include <tuple>
#include <type_traits>
#include <unordered_map>

#include "traces/io.hpp"

namespace ep::trace {
namespace {

using namespace detail;

// Times travel as integer nanoseconds (Perfetto's own resolution), written as
// microseconds, and may lie within +-1e9 s (31.7 years: a simulated training
// of months fits, a garbage time does not); a span lasts at most 8e6 s (92
// days). Within 8e6 s of the start, ns -> us double -> text -> double -> ns
// is exact, so write -> read -> write gives the same bytes. Beyond, neither
// a double of microseconds nor the trace's double of seconds holds every
// nanosecond: the writer rounds each time to one the reader gets back
// exactly (at 1e9 s, within 64 ns), a round trip moves a time by at most
// 128 ns, and the order of times, so how spans nest, is kept. Durations up
// to 8e6 s travel exactly.
constexpr double kMaxAbsTimeS = kMaxTraceTimeS;
constexpr double kMaxAbsTimeUs = kMaxAbsTimeS * 1e6;
constexpr double kMaxSpanS = kMaxTraceSpanS;
constexpr double kMaxSpanUs = kMaxSpanS * 1e6;

// Whole microseconds exactly, plus the fraction: one rounding only.
double to_us(std::int64_t ns) { return static_cast<double>(ns / 1000) + static_cast<double>(ns % 1000) / 1e3; }

std::int64_t us_to_ns(double us) {
  const double whole = std::trunc(us);
  return static_cast<std::int64_t>(whole) * 1000 + std::llround((us - whole) * 1e3);
}

// The time the reader will see for `ns`.
std::int64_t representable(std::int64_t ns) { return us_to_ns(to_us(ns)); }

std::int64_t seconds_to_ns(double s, const std::string& where, const char* what) {
  if (!(std::abs(s) <= kMaxAbsTimeS))
    throw Error(where + ": " + what + " = " + std::to_string(s) +
                " s, expected a time in [-1e9, 1e9] s (31.7 years either side of the run's start)");
  return representable(std::llround(s * 1e9));
}

bool known_category(std::string_view c) {
  return std::find(kEventCategories.begin(), kEventCategories.end(), c) != kEventCategories.end();
}

std::string categories_text() {
  std::string s = "one of";
  for (const auto c : kEventCategories)
    s += std::string(c == kEventCategories[0] ? " " : ", ") + std::string(c);
  return s;
}

void check_track(const Track& t, const std::string& where) {
  if (t.node < (t.kind == TrackKind::Gpu ? 0 : -1) || t.index < 0)
    throw Error(where + ": track '" + t.name + "': node " + std::to_string(t.node) + ", index " +
                std::to_string(t.index) + ": expected node >= 0 (>= -1 for links) and index >= 0");
}

// The optional integer args of a span, in file order; -1 = absent.
template <class E, class F>
void visit_args(E& e, F&& f) {
  f("stage", e.stage);
  f("microbatch", e.microbatch);
  f("bucket", e.bucket);
  f("replica", e.replica);
  f("plan_id", e.plan_id);
  f("iteration", e.iteration);
  f("bytes", e.bytes);
  f("epoch", e.epoch);
}

// Every flow id has exactly one start and one end.
class FlowPairs {
 public:
  void add(std::int64_t id, bool start, const std::string& where) {
    Ends& e = ends_[id];
    if (++(start ? e.starts : e.ends) > 1)
      throw Error(where + ": flow id " + std::to_string(id) + " has a second " + (start ? "start" : "end"));
    if (e.first.empty()) e.first = where;
  }
  void check() const {
    for (const auto& [id, e] : ends_)
      if (e.starts != e.ends)
        throw Error(e.first + ": flow id " + std::to_string(id) +
                    (e.starts ? " starts here but never ends" : " ends here but never starts"));
  }

 private:
  struct Ends {
    int starts = 0, ends = 0;
    std::string first;  // where the id was first seen
  };
  std::map<std::int64_t, Ends> ends_;
};

json metadata_event(const char* name, int pid, int tid, json args) {
  return {{"ph", "M"}, {"name", name}, {"pid", pid}, {"tid", tid}, {"ts", 0}, {"args", std::move(args)}};
}

// "node N" -> N, "network" -> -1.
bool parse_process_name(const std::string& s, int& node) {
  if (s == "network") {
    node = -1;
    return true;
  }
  if (!s.starts_with("node ")) return false;
  const char* end = s.data() + s.size();
  const auto [p, ec] = std::from_chars(s.data() + 5, end, node);
  return ec == std::errc() && p == end && node >= 0;
}

using SpanNs = std::pair<std::int64_t, std::int64_t>;

// Every event's span in nanoseconds, once everything the format requires of
// the events is checked: a known track and category, times in range, flow
// ids paired.
std::vector<SpanNs> checked_spans(const Trace& t, const std::string& ctx) {
  FlowPairs flows;
  std::vector<SpanNs> spans_ns;
  spans_ns.reserve(t.events.size());
  for (std::size_t i = 0; i < t.events.size(); ++i) {
    const Event& e = t.events[i];
    const std::string where = ctx + ": event " + std::to_string(i) + " ('" + e.name + "')";
    if (e.track < 0 || static_cast<std::size_t>(e.track) >= t.tracks.size())
      throw Error(where + ": track " + std::to_string(e.track) + " out of range (" +
                  std::to_string(t.tracks.size()) + " tracks)");
    if (!known_category(e.category))
      throw Error(where + ": category '" + e.category + "': expected " + categories_text());
    const auto t0 = seconds_to_ns(e.start_s, where, "start_s"), t1 = seconds_to_ns(e.end_s, where, "end_s");
    if (t1 < t0) throw Error(where + ": end_s < start_s");
    if (static_cast<double>(t1 - t0) > kMaxSpanUs * 1e3)
      throw Error(where + ": lasts " + std::to_string((t1 - t0) / 1'000'000'000) +
                  " s, expected at most 8e6 s (92 days, the longest span kept to the nanosecond)");
    if (e.flow_out < 0 || e.flow_in < 0) throw Error(where + ": flow ids must be >= 0 (0 = none)");
    if (e.flow_out > 0) flows.add(e.flow_out, true, where);
    if (e.flow_in > 0) flows.add(e.flow_in, false, where);
    spans_ns.emplace_back(t0, t1);
  }
  flows.check();
  return spans_ns;
}

// Perfetto drops a span that partly overlaps another on its thread: the
// spans of a track must nest or be disjoint.
void check_nesting(const Trace& t, const std::vector<SpanNs>& spans_ns, const std::string& ctx) {
  std::vector<std::size_t> by_start(t.events.size());
  std::iota(by_start.begin(), by_start.end(), 0);
  std::stable_sort(by_start.begin(), by_start.end(), [&](std::size_t a, std::size_t b) {
    return std::tuple(t.events[a].track, spans_ns[a].first, -spans_ns[a].second) <
           std::tuple(t.events[b].track, spans_ns[b].first, -spans_ns[b].second);
  });
  std::vector<std::size_t> open;  // enclosing spans of the current track
  for (std::size_t k = 0; k < by_start.size(); ++k) {
    const std::size_t i = by_start[k];
    if (k > 0 && t.events[by_start[k - 1]].track != t.events[i].track) open.clear();
    while (!open.empty() && spans_ns[open.back()].second <= spans_ns[i].first) open.pop_back();
    if (!open.empty() && spans_ns[i].second > spans_ns[open.back()].second)
      throw Error(ctx + ": event " + std::to_string(i) + " ('" + t.events[i].name + "') partly overlaps event " +
                  std::to_string(open.back()) + " ('" + t.events[open.back()].name + "') on track '" +
                  t.tracks[t.events[i].track].name + "': spans of a track must nest or be disjoint " +
                  "(see separate_overlaps)");
    open.push_back(i);
  }
}

// The JSON text of `j`, or an ep::Error naming what could not be written
// (e.g. a name that is not UTF-8).
std::string dump_json(const json& j, const std::string& ctx, const std::string& what) {
  try {
    return j.dump();
  } catch (const json::exception& e) {
    throw Error(ctx + ": " + what + ": " + e.what());
  }
}

// Writes the elements of traceEvents, comma-separated.
class EventWriter {
 public:
  EventWriter(const Trace& t, std::ostream& out, std::string ctx) : t_(t), out_(out), ctx_(std::move(ctx)) {
    int max_node = -1;
    for (const Track& tr : t.tracks) max_node = std::max(max_node, tr.node);
    network_pid_ = max_node + 2;
  }

  // Nodes are pids 1.. (Perfetto treats pid 0 as special); the network comes last.
  [[nodiscard]] int pid_of(int node) const { return node >= 0 ? node + 1 : network_pid_; }

  // Process and thread names and their order: within a process, GPUs before
  // links, each by index.
  void metadata() {
    std::map<int, std::string> processes;
    for (const Track& tr : t_.tracks)
      processes[pid_of(tr.node)] = tr.node >= 0 ? "node " + std::to_string(tr.node) : "network";
    for (const auto& [pid, name] : processes) {
      emit(metadata_event("process_name", pid, 0, {{"name", name}}), name);
      emit(metadata_event("process_sort_index", pid, 0, {{"sort_index", pid}}), name);
    }
    std::vector<std::size_t> order(t_.tracks.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return std::tuple(t_.tracks[a].kind, t_.tracks[a].index, t_.tracks[a].lane) <
             std::tuple(t_.tracks[b].kind, t_.tracks[b].index, t_.tracks[b].lane);
    });
    std::vector<int> sort_index(t_.tracks.size());
    for (std::size_t r = 0; r < order.size(); ++r) sort_index[order[r]] = static_cast<int>(r);
    for (std::size_t i = 0; i < t_.tracks.size(); ++i) {
      const Track& tr = t_.tracks[i];
      const int pid = pid_of(tr.node), tid = static_cast<int>(i) + 1;
      const std::string what = "track " + std::to_string(i);
      emit(metadata_event("thread_name", pid, tid,
                          {{"name", tr.name},
                           {"kind", tr.kind == TrackKind::Gpu ? "gpu" : "link"},
                           {"index", tr.index},
                           {"lane", tr.lane}}),
           what);
      emit(metadata_event("thread_sort_index", pid, tid, {{"sort_index", sort_index[i]}}), what);
    }
  }

  // Spans and flows are written by hand: one JSON object per event costs
  // more than the simulation that produced it. Strings are escaped by the
  // JSON library once per distinct text (names repeat: "2F0" per replica
  // and iteration); numbers in their shortest round-trip form.
  void span(std::size_t i, SpanNs ns) {
    const Event& e = t_.events[i];
    const auto [t0, t1] = ns;
    const int pid = pid_of(t_.tracks[e.track].node), tid = e.track + 1;
    const std::string what = "event " + std::to_string(i);
    const std::string& name = quoted(e.name, what);
    line_.clear();
    line_ += first_ ? "" : ",\n";
    first_ = false;
    line_ += "{\"ph\":\"X\",\"name\":";
    line_ += name;
    line_ += ",\"cat\":";
    line_ += quoted(e.category, what);
    line_ += ",\"pid\":";
    number(pid);
    line_ += ",\"tid\":";
    number(tid);
    line_ += ",\"ts\":";
    number(to_us(t0));
    line_ += ",\"dur\":";
    number(to_us(t1 - t0));
    line_ += ",\"args\":{\"action\":";
    line_ += name;
    visit_args(e, [&](const char* key, auto v) {
      if (v == -1) return;
      line_ += ",\"";
      line_ += key;
      line_ += "\":";
      number(v);
    });
    line_ += "}}";
    // Flow ends bind to the enclosing slice: put them mid-span.
    const double mid = to_us(t0 + (t1 - t0) / 2);
    if (e.flow_out > 0) flow(",\n{\"ph\":\"s\",\"name\":\"flow\",\"cat\":\"flow\",\"id\":", e.flow_out, pid, tid, mid);
    if (e.flow_in > 0)
      flow(",\n{\"ph\":\"f\",\"bp\":\"e\",\"name\":\"flow\",\"cat\":\"flow\",\"id\":", e.flow_in, pid, tid, mid);
    out_ << line_;
  }

 private:
  void emit(const json& j, const std::string& what) {
    out_ << (first_ ? "" : ",\n") << dump_json(j, ctx_, what);
    first_ = false;
  }
  const std::string& quoted(const std::string& text, const std::string& what) {
    if (const auto it = escaped_.find(text); it != escaped_.end()) return it->second;
    return escaped_.emplace(text, dump_json(json(text), ctx_, what)).first->second;
  }
  void number(auto v) {
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    line_.append(buf, r.ptr);
  }
  void flow(const char* head, std::int64_t id, int pid, int tid, double ts) {
    line_ += head;
    number(id);
    line_ += ",\"pid\":";
    number(pid);
    line_ += ",\"tid\":";
    number(tid);
    line_ += ",\"ts\":";
    number(ts);
    line_ += '}';
  }

  const Trace& t_;
  std::ostream& out_;
  std::string ctx_;
  int network_pid_ = 1;
  bool first_ = true;
  std::string line_;
  std::unordered_map<std::string, std::string> escaped_;
};

}  // namespace

void write_chrome_trace(const Trace& t, std::ostream& out, const std::string& path) {
  const std::string ctx = "writing " + path;
  check_source(t.source, ctx);
  for (const Track& tr : t.tracks) check_track(tr, ctx);
  const std::vector<SpanNs> spans_ns = checked_spans(t, ctx);
  check_nesting(t, spans_ns, ctx);
  // otherData first, so that a reader checks the schema before any event.
  out << "{\"displayTimeUnit\":\"ms\",\n\"otherData\":"
      << dump_json({{"schema", kSchemaVersion},
                    {"source", t.source},
                    {"config", t.config},
                    {"mode", t.mode},
                    {"metadata", metadata_json(t.metadata)}},
                   ctx, "otherData")
      << ",\n\"traceEvents\":[\n";
  EventWriter w(t, out, ctx);
  w.metadata();
  for (std::size_t i = 0; i < t.events.size(); ++i) w.span(i, spans_ns[i]);
  out << "\n]}\n";
}

void write_chrome_trace(const Trace& t, const std::string& path) {
  AtomicFile file(path);
  write_chrome_trace(t, file.stream(), path);
  file.commit();
}

namespace {

// Reads a trace element by element as the JSON parser delivers them; the
// threads' tracks and the spans' tracks are resolved once all metadata is in.
class ChromeTraceReader {
 public:
  explicit ChromeTraceReader(std::string path) : path_(std::move(path)) {}

  // `in` holds the trace; path_ names it in errors.
  Trace read(std::istream& in) {
    // Each element of traceEvents is read as soon as it is parsed, then
    // dropped: a large trace never sits in memory as JSON.
    bool in_events = false, in_other = false;
    std::size_t n_events = 0;
    const json doc = parse_json<json>(in, path_, [&](int depth, json::parse_event_t e, json& parsed) {
      using E = json::parse_event_t;
      if (depth == 1 && e == E::key) {
        in_events = parsed == "traceEvents";
        in_other = parsed == "otherData";
      }
      if (depth == 1 && e == E::object_end && in_other) read_other(parsed);
      if (depth != 2 || !in_events || e == E::key || e == E::object_start || e == E::array_start) return true;
      read_event(parsed, n_events++);
      return false;
    });
    if (!doc.is_object()) throw Error(path_ + ": expected a JSON object at the top level");
    if (!have_other_) read_other(get_object(doc, "otherData", path_));
    get_array(doc, "traceEvents", path_);
    resolve_tracks();
    flows_.check();
    return std::move(t_);
  }

 private:
  struct Thread {
    std::int64_t pid;
    Track track;
    int index = -1;  // in Trace::tracks
  };
  struct Span {  // per X event: its thread (resolved once all threads are known) and span
    std::int64_t pid, tid;
    std::size_t at;  // index in traceEvents
    std::int64_t t0_ns, t1_ns;
  };

  [[nodiscard]] std::string where(std::size_t i) const { return path_ + ": traceEvents[" + std::to_string(i) + "]"; }

  void read_other(const json& other) {
    const std::string ow = path_ + ": otherData";
    check_schema(other, ow);
    check_keys(other, {"schema", "source", "config", "mode", "metadata"}, ow);
    t_.source = get_string(other, "source", ow);
    check_source(t_.source, ow);
    t_.config = get_string(other, "config", ow);
    t_.mode = get_string(other, "mode", ow);
    t_.metadata = get_metadata(other, "metadata", ow);
    have_other_ = true;
  }

  void read_event(const json& ev, std::size_t i) {
    const std::string w = where(i);
    if (!ev.is_object()) throw Error(w + ": expected an object");
    const std::string ph = get_string(ev, "ph", w);
    if (ph == "M") return read_metadata(ev, w);
    if (ph != "X" && ph != "s" && ph != "f") bad_field(w, "ph", "one of X, M, s, f", ev.at("ph"));
    const auto pid = get_int(ev, "pid", w, 1, INT_MAX), tid = get_int(ev, "tid", w, 1, INT_MAX);
    const double ts_us = get_number(ev, "ts", w);
    if (!(std::abs(ts_us) <= kMaxAbsTimeUs)) bad_field(w, "ts", "microseconds in [-1e15, 1e15]", ev.at("ts"));
    const Span s{pid, tid, i, us_to_ns(ts_us), 0};
    if (ph == "X")
      read_span(ev, w, s);
    else
      read_flow(ev, w, ph, s);
  }

  void read_metadata(const json& ev, const std::string& w) {
    const auto pid = get_int(ev, "pid", w, 1, INT_MAX);
    get_int(ev, "tid", w, 0, INT_MAX);
    get_number(ev, "ts", w);
    const std::string name = get_string(ev, "name", w), aw = w + ": args";
    const json& args = get_object(ev, "args", w);
    if (name == "process_name") {
      int node = 0;
      if (!parse_process_name(get_string(args, "name", aw), node))
        bad_field(aw, "name", "\"node N\" or \"network\"", args.at("name"));
      if (!node_of_pid_.emplace(pid, node).second)
        throw Error(w + ": a second process_name for pid " + std::to_string(pid));
    } else if (name == "thread_name") {
      const auto tid = get_int(ev, "tid", w, 1, INT_MAX);
      Track tr;
      tr.name = get_string(args, "name", aw);
      const std::string kind = get_string(args, "kind", aw);
      if (kind != "gpu" && kind != "link") bad_field(aw, "kind", "\"gpu\" or \"link\"", args.at("kind"));
      tr.kind = kind == "gpu" ? TrackKind::Gpu : TrackKind::Link;
      tr.index = static_cast<int>(get_int(args, "index", aw, 0, INT_MAX));
      tr.lane = static_cast<int>(get_int(args, "lane", aw, 0, INT_MAX));
      if (!threads_.emplace(tid, Thread{pid, tr}).second)
        throw Error(w + ": a second thread_name for tid " + std::to_string(tid));
    } else if (name == "process_sort_index" || name == "thread_sort_index") {
      get_int(args, "sort_index", aw, INT_MIN, INT_MAX);
    } else {
      bad_field(w, "name", "process_name, thread_name, process_sort_index or thread_sort_index", ev.at("name"));
    }
  }

  void read_span(const json& ev, const std::string& w, Span s) {
    Event e;
    e.name = get_string(ev, "name", w);
    e.category = get_string(ev, "cat", w);
    if (!known_category(e.category)) bad_field(w, "cat", categories_text(), ev.at("cat"));
    const double dur_us = get_number(ev, "dur", w);
    if (!(dur_us >= 0 && dur_us <= kMaxSpanUs)) bad_field(w, "dur", "microseconds in [0, 8e12]", ev.at("dur"));
    s.t1_ns = s.t0_ns + us_to_ns(dur_us);
    if (s.t1_ns > kMaxAbsTimeUs * 1e3) throw Error(w + ": ts + dur is beyond 1e15 microseconds");
    e.start_s = static_cast<double>(s.t0_ns) / 1e9;
    e.end_s = static_cast<double>(s.t1_ns) / 1e9;
    const std::string aw = w + ": args";
    const json& args = get_object(ev, "args", w);
    for (const auto& [key, value] : args.items()) {
      bool known = key == "action";
      visit_args(e, [&](const char* k, auto&) { known = known || key == k; });
      if (!known) throw Error(aw + ": unknown field '" + key + "'");
    }
    if (args.contains("action") && args.at("action") != e.name)
      bad_field(aw, "action", "the event's name", args.at("action"));
    visit_args(e, [&](const char* k, auto& v) {
      using T = std::remove_reference_t<decltype(v)>;
      if (args.contains(k)) v = static_cast<T>(get_int(args, k, aw, -1, std::numeric_limits<T>::max()));
    });
    t_.events.push_back(std::move(e));
    spans_.push_back(s);
  }

  void read_flow(const json& ev, const std::string& w, const std::string& ph, const Span& at) {
    const auto id = get_int(ev, "id", w, 1, std::numeric_limits<std::int64_t>::max());
    if (ph == "f" && field(ev, "bp", w) != "e") bad_field(w, "bp", "\"e\"", ev.at("bp"));
    const Span* x = spans_.empty() ? nullptr : &spans_.back();
    if (!x || at.pid != x->pid || at.tid != x->tid || at.t0_ns < x->t0_ns || at.t0_ns > x->t1_ns)
      throw Error(w + ": flow event is not inside the X event just before it (same pid and tid, ts within its span)");
    std::int64_t& slot = ph == "s" ? t_.events.back().flow_out : t_.events.back().flow_in;
    if (slot != 0) throw Error(w + ": the X event before it already has a flow " + (ph == "s" ? "start" : "end"));
    slot = id;
    flows_.add(id, ph == "s", w);
  }

  // Threads become tracks (their node from their process), spans get theirs.
  void resolve_tracks() {
    for (auto& [tid, th] : threads_) {
      const auto it = node_of_pid_.find(th.pid);
      if (it == node_of_pid_.end())
        throw Error(path_ + ": thread tid " + std::to_string(tid) + ": pid " + std::to_string(th.pid) +
                    " has no process_name metadata");
      th.track.node = it->second;
      check_track(th.track, path_);
      th.index = static_cast<int>(t_.tracks.size());
      t_.tracks.push_back(th.track);
    }
    for (std::size_t k = 0; k < spans_.size(); ++k) {
      const Span& s = spans_[k];
      const auto th = threads_.find(s.tid);
      if (th == threads_.end())
        throw Error(where(s.at) + ": tid " + std::to_string(s.tid) + " has no thread_name metadata");
      if (th->second.pid != s.pid)
        throw Error(where(s.at) + ": pid " + std::to_string(s.pid) + ", but thread " + std::to_string(s.tid) +
                    " belongs to pid " + std::to_string(th->second.pid));
      t_.events[k].track = th->second.index;
    }
  }

  std::string path_;
  Trace t_;
  bool have_other_ = false;
  std::map<std::int64_t, int> node_of_pid_;
  std::map<std::int64_t, Thread> threads_;  // by tid
  std::vector<Span> spans_;
  FlowPairs flows_;
};

}  // namespace

Trace read_chrome_trace(const std::string& path) {
  InputFile in(path, InputFormat{"trace", kPerIterationBytes, kPerIterationWhy});
  return ChromeTraceReader(path).read(in.stream());
}

Trace read_chrome_trace(std::istream& in, const std::string& name) { return ChromeTraceReader(name).read(in); }

}  // namespace ep::trace
