// The trace format shared by the simulator and the executor: timeline
// events (Chrome trace-event JSON, opens in Perfetto), per-epoch metrics
// (CSV) and a run summary (JSON). Schema: traces/SCHEMA.md.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "planner/schedule.hpp"

namespace ep::trace {

inline constexpr const char* kSchemaVersion = "elasticpipe.trace/3";

// Event::category takes one of these; readers and writers reject others.
inline constexpr std::array<std::string_view, 10> kEventCategories = {
    "forward", "backward",  "frozen_forward", "cache_read", "cache_write",
    "send",    "recv",      "allreduce",      "optimizer",  "transition"};

// The Event::category of a schedule action, for both back ends.
[[nodiscard]] const char* action_category(ActionKind kind);

// A track is one row of the timeline: a GPU (one thread per GPU of a node)
// or a link (one thread per link), grouped by node (one process per node;
// links between nodes go to a separate "network" process, node = -1).
enum class TrackKind { Gpu, Link };

struct Track {
  TrackKind kind = TrackKind::Gpu;
  int node = 0;          // -1 for links outside any node
  int index = 0;         // GPU index in its node, or link index in its group
  std::string name;      // "gpu3", "pcie3.up", "ib0.down"
  // Perfetto drops spans that partly overlap on one thread, so spans that
  // overlap others of their track (asynchronous sends, all-reduces,
  // concurrent transfers on a link) go to extra rows, lanes 1, 2, ...
  int lane = 0;
  friend bool operator==(const Track&, const Track&) = default;
};

// One span on one track. Compute, transfer, all-reduce and transition
// spans alike; fields that do not apply stay -1 / empty.
struct Event {
  int track = 0;          // index into Trace::tracks
  std::string name;       // the action's text: "2F0", "1SEND_F3>2", "0AR1", "transition K 8->4"
  std::string category;   // forward|backward|frozen_forward|cache_read|cache_write|send|recv|
                          // allreduce|optimizer|transition
  double start_s = 0;
  double end_s = 0;
  int stage = -1;
  int microbatch = -1;
  int bucket = -1;
  int replica = -1;       // global rank of the pipeline replica
  int plan_id = -1;
  int iteration = -1;     // iteration index within its epoch
  std::int64_t bytes = -1;  // transfers
  // A send and its receive share a flow id (> 0): Perfetto draws an arrow.
  std::int64_t flow_out = 0;  // this span starts a flow
  std::int64_t flow_in = 0;   // this span ends a flow
  int epoch = -1;             // the training epoch the span belongs to
};

// A real run's metadata key: the seconds its chunk search took before the
// process's first epoch (absent where it found its chunk memo). No epoch
// holds that search, and it does the process's one-off work that a run
// with its memo pays in its first epoch.
inline constexpr const char* kChunkSearchBeforeFirstEpochKey = "chunk_search_before_first_epoch_s";
// Both back ends' metadata key: the seconds of the run's start, before its
// first epoch (RunBackend::start; a real run's also holds its planning and
// any chunk search), as ModeSummary::start_s has it. Its spans are named
// kStartEventName.
inline constexpr const char* kStartKey = "start_s";
inline constexpr const char* kStartEventName = "start";

struct Trace {
  std::string source;   // "sim" or "exec"
  std::string config;   // config path
  std::string mode;     // baseline|freeze|autopipe|autodp|autocache (sim) or "train"
  std::vector<Track> tracks;
  std::vector<Event> events;
  std::map<std::string, std::string> metadata;  // free-form, e.g. network model

  // Index of the track, adding it when new.
  int track(const Track& t);
};

// Moves spans of events[first..] that partly overlap another span of their
// track to lane tracks, so every track holds only disjoint or nested spans
// (what the writer requires). Spans the device itself runs in order
// (forward, backward, frozen_forward, optimizer, recv, cache_read,
// cache_write) keep the main lane; the others take the first lane where
// they nest in the span open there (a transition's parts stay with it) or
// none is open, in order of start time. Deterministic.
void separate_overlaps(Trace& trace, std::size_t first = 0);

// What a Chrome trace can hold (write_chrome_trace refuses the rest): times
// within 1e9 s (31.7 years) of the run's start, spans of at most 8e6 s (92
// days). A simulated training may last longer than that; its trace then
// leaves out what lies beyond.
constexpr double kMaxTraceTimeS = 1e9, kMaxTraceSpanS = 8e6;
// Whether every event of `t`, `offset_s` later, lies within those bounds.
[[nodiscard]] bool fits_trace(const Trace& t, double offset_s);

// The run's start as both back ends note it (kStartKey), and as read back:
// nullopt where the trace has none; a value that is not wholly a finite
// number is refused.
void note_start(Trace& t, double start_s);
[[nodiscard]] std::optional<double> start_of(const Trace& t);

// Appends `from`'s events to `into`, `offset_s` later, on `into`'s tracks
// (added when new) and with flow ids renumbered above `into`'s: how runs
// traced separately go on one timeline. Returns the index of the first
// appended event.
std::size_t append(Trace& into, const Trace& from, double offset_s);

// Per-epoch metrics: one row per epoch (and mode, for the simulator).
struct EpochMetrics {
  std::string source;  // sim|exec
  std::string mode;
  int epoch = 0;
  int plan_id = 0;
  int frozen_layers = 0;
  // Layers frozen past the prefix (decision 0037), "4 7"; "-" when none.
  // Files written before it have no such column and read as "-".
  std::string frozen_inside = "-";
  int K = 0;
  int M = 0;
  int replicas = 0;
  bool cache = false;
  double epoch_s = 0;
  double iteration_s = 0;
  double samples_per_s = 0;
  double bubble_fraction = 0;  // share of the devices' iteration computing nothing: 1 - compute_s / iteration
  double exposed_comm_s = 0;   // per iteration: what communication adds to it
  double comm_s = 0;           // per iteration, per device: DDP all-reduce busy time (union of bucket spans)
  double compute_s = 0;        // per iteration, per device: F, B, frozen forward, optimizer
  double cache_hit_ratio = 0;  // share of samples whose frozen output came from the cache
  double transition_s = 0;     // overhead charged to this epoch's start
  double loss = -1;            // exec only; -1 = not measured
  double accuracy = -1;
  friend bool operator==(const EpochMetrics&, const EpochMetrics&) = default;
};

// Frozen layers as the tables print them: "4", or "4+2" with two layers
// frozen inside (`inside` as EpochMetrics::frozen_inside holds them).
[[nodiscard]] std::string frozen_text(int frozen_layers, const std::string& inside);
[[nodiscard]] inline std::string frozen_text(const EpochMetrics& m) {
  return frozen_text(m.frozen_layers, m.frozen_inside);
}

// Whole-run results: one entry per mode (simulator) or one "train" entry
// (executor). Speedups are over the mode RunSummary::reference names.
struct ModeSummary {
  std::string mode;
  double start_s = 0;                    // the run's start, before its first epoch (kStartKey)
  double total_s = 0;                    // time to finish all epochs, from the start
  double samples_per_s = 0;              // training samples / total_s
  std::optional<double> speedup;         // reference total_s / total_s; none without a reference that fits
  std::optional<double> final_accuracy;  // none: not measured
  bool fits_memory = true;               // every plan's fullest device within its memory (the memory model)
  double peak_memory_bytes = 0;          // the fullest device of any plan (the memory model)
  std::int64_t updates = 0;              // optimizer steps over the run
  std::int64_t global_batch_min = 0;     // samples per update, over the run's plans
  std::int64_t global_batch_max = 0;
  double utilisation = 0;                // executed model FLOP/s over every device's peak
  std::vector<double> epoch_s;           // one entry per epoch
  friend bool operator==(const ModeSummary&, const ModeSummary&) = default;
};

struct RunSummary {
  std::string source;  // sim|exec
  std::string config;
  std::optional<std::string> reference;  // the mode speedups are over; none: no speedups
  std::vector<ModeSummary> modes;        // mode names unique
  std::map<std::string, std::string> metadata;
  friend bool operator==(const RunSummary&, const RunSummary&) = default;
};

// Writers validate their input and readers validate the file; both throw
// ep::Error naming the file and the offending event, line or field.
// Chrome trace-event JSON (Perfetto, chrome://tracing). Times are kept to
// the nanosecond (within 52 days; to 64 ns up to the limit) and must lie
// within [-1e9, 1e9] s.
void write_chrome_trace(const Trace& trace, const std::string& path);
Trace read_chrome_trace(const std::string& path);

// Per-epoch metrics CSV: header = the EpochMetrics fields in order.
void write_epoch_csv(const std::vector<EpochMetrics>& rows, const std::string& path);
std::vector<EpochMetrics> read_epoch_csv(const std::string& path);

// Run summary JSON.
void write_summary_json(const RunSummary& summary, const std::string& path);

// The writers above write atomically (traces/atomic_file.hpp). These write
// the same bytes to a stream, e.g. an AtomicFile's when a run's files are
// committed together; `path` names the file in errors.
void write_chrome_trace(const Trace& trace, std::ostream& out, const std::string& path);
void write_epoch_csv(const std::vector<EpochMetrics>& rows, std::ostream& out, const std::string& path);
void write_summary_json(const RunSummary& summary, std::ostream& out, const std::string& path);
RunSummary read_summary_json(const std::string& path);
// A trace from a stream (the bytes another process sent), checked as a
// file's is; `name` names it in errors.
Trace read_chrome_trace(std::istream& in, const std::string& name);

}  // namespace ep::trace
