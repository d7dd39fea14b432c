// AutoCache's decision (SPEC §5): cache the frozen prefix's output when a
// cache read is predicted to be cheaper than recomputing F_frozen.
#pragma once

#include <optional>
#include <string>

#include "planner/cost_model.hpp"

namespace ep {

struct CacheDecision {
  bool on = false;
  CacheTier tier = CacheTier::HostMemory;  // host memory if the node's cache fits, else disk
  double bytes_per_node = 0;               // the whole cache of one node's shard
  double read_s = 0;                       // one micro-batch, predicted
  double frozen_forward_s = 0;             // one micro-batch, predicted
  std::string reason;
};

// A back end's measurement for one frozen depth: reading `micro_batch`
// samples from the cache, and running them through the frozen prefix.
struct MeasuredCache {
  double read_s = 0;
  double frozen_forward_s = 0;
};

// Whether any cache of the frozen layers' outputs can serve training: not
// where data.augment transforms the inputs, since the frozen outputs then
// change every epoch (a cache filled once would feed stale ones, and users
// would lose accuracy without a word). The config refuses planner.cache =
// "on" there; "auto" stays off and says why.
[[nodiscard]] bool cache_allowed(const Config&);

// `micro_batch`: samples per read. Policy off/on is obeyed (on with nothing
// frozen, or without AutoPipe, is off: there is no separate frozen output to
// cache). With `measured`, auto compares the measured times instead of the
// cost model's.
[[nodiscard]] CacheDecision decide_cache(const Config&, const ModelSpec&, const CostModel&,
                                         int frozen_layers, int micro_batch,
                                         const MeasuredCache* measured = nullptr);

// AutoCache's probe at a new frozen depth (a back end's measurement before
// the step is planned): one batch through the frozen prefix and one read
// back from the cache tier, each run once untimed and kCacheProbeRuns times
// on the clock, after the batch is written to the tier once.
inline constexpr int kCacheProbeRuns = 3;
// The probe's predicted seconds at `frozen_layers` with batches of `batch`.
// A back end sets the probe up at its first one (`first`: its batch on the
// device, its file), which a profile measures (CostModel::cache_probe_setup_s).
[[nodiscard]] double predict_cache_probe_s(const Config&, const ModelSpec&, const CostModel&, int frozen_layers,
                                           int batch, bool first);

// Where a cache write is stored. Rows on a GPU (exec.device = "cuda") are
// copied off it on a side stream and stored by the cache's own writer
// while the device goes on, in call order, at most kCacheWritesInFlight
// batches queued: a writer that falls behind makes the device wait. Rows
// the host computes are stored before the device goes on: handing them to
// another thread cost more than it hid (2-3 ms more per 77.5 MB on 2 cores).
inline constexpr int kCacheWritesInFlight = 4;
[[nodiscard]] bool cache_writes_behind(const Config&);

// Where a cache read runs ahead of the device. For a GPU the stage worker
// copies the rows on the host and starts their copy to the device on a
// side stream while the device still runs the previous iteration (the host
// queues an iteration before it waits for the one before), so the device
// waits only where the reads take longer than its own work. On the host
// the worker's copy is the device's time. Measured on an H100 (ViT-B/16,
// 77.5 MB per batch read in 1.6-1.9 ms): iterations 0.3-0.7 ms above their
// compute, where a read in series would add its whole time.
[[nodiscard]] bool cache_reads_ahead(const Config&);

// Whether the node's cache file is made ahead: while a plan without the
// cache trains, the back end creates the file a later freeze step may turn
// on, on a host thread, so that step does not wait for it (on an H200 the
// 1.55 GB file of configs/gpu took 0.14-0.27 s, the device idle). A later
// step may turn it on where freeze steps remain (`steps_remain`), layers
// freeze, and the policy is on, or auto with a read predicted cheaper than
// the frozen forward at the deepest depth the run may freeze (the frozen
// forward only grows with depth). The tier the file will have; nullopt
// where none is made ahead.
[[nodiscard]] std::optional<CacheTier> cache_file_ahead(const Config&, const ModelSpec&, const CostModel&,
                                                        bool steps_remain);

[[nodiscard]] std::string to_string(CacheTier);

}  // namespace ep
