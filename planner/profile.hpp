// A profile: timings measured on the real executor (`elasticpipe profile`
// writes one), which FittedCostModel turns into a cost model. Plain data and
// its JSON file; no fitting here.
//
// File format, schema "elasticpipe.profile/1" (one JSON object; every key
// below is required except `model_chain`, `grad_norms` and `cache_probes`, no other key is allowed; every
// sample list may be empty except `compute`):
//
//   {
//     "schema": "elasticpipe.profile/1",
//     "environment": "host x, 16 cores, cpu, libtorch 1.13",   // free text
//     "model": "vit hidden 192, 12 layers, 65 tokens",         // free text
//     "compute":     [ {"sublayer_kind": "attention", "op": "forward", "samples": 8, "seconds": 0.0012}, ... ],
//     "model_chain": [ {"op": "forward", "samples": 8, "seconds": 0.031}, ... ],
//     "p2p":         [ {"bytes": 1048576, "seconds": 0.0004}, ... ],
//     "allreduce":   [ {"bytes": 1048576, "ranks": 4, "seconds": 0.002}, ... ],
//     "cache":       [ {"tier": "host", "op": "read", "bytes": 1048576, "seconds": 0.0001}, ... ],
//     "optimizer":   [ {"params": 1000000, "seconds": 0.003}, ... ],
//     "grad_norms":  [ {"params": 1000000, "seconds": 0.001}, ... ],
//     "transitions": [ {"what": "group_rebuild", "ranks": 4, "bytes": 0, "seconds": 0.8}, ... ],
//     "cache_probes": [ {"frozen_layers": 6, "samples": 128, "seconds": 0.057}, ... ]
//   }
//
//   sublayer_kind  "stem" | "attention" | "mlp" | "head" (model_spec.hpp's kinds)
//   model_chain    the whole model run as one chain (every sublayer in order),
//                  per op and micro-batch size: what `compute` was scaled to
//                  sum to (exec/profiler.cpp); informative, the fitter does
//                  not read it. Absent in profiles written before it.
//   op (compute)   "forward" | "forward_again" | "backward" | "frozen_forward" |
//                  "backward_input" (the CostModel's terms; forward_again: a later
//                  micro-batch's forward in the same iteration, bf16 weight copies
//                  reused; measured under bf16 only, for every kind or none, and
//                  without it forward stands in; backward_input: the input's
//                  gradient alone, as a layer frozen inside runs its backward,
//                  for attention and mlp or none, and without it the backward
//                  by its FLOP share stands in. Absent in profiles written
//                  before it.)
//   optimizer      the update alone (grad_norms: the gradients' norms alone,
//                  which a step computes only where the freeze policy reads
//                  them). Profiles written before grad_norms timed the
//                  norms inside the update.
//   tier           "host" | "disk";  op (cache) "read" | "write"
//   samples        micro-batch size, an integer >= 1
//   ranks          an integer >= 1
//   bytes, params  numbers >= 0
//   seconds        a number > 0: one call's wall time (a timer cannot read 0)
//   what           non-empty free text naming the transition step
//   cache_probes   AutoCache's probe at a frozen depth on batches of `samples`,
//                  timed whole once set up (its frozen forwards and reads, each
//                  once untimed and kCacheProbeRuns times timed, and its write),
//                  as a run's later probes run: on a GPU each timed run waits
//                  behind a spin the length of the last run's queuing, which
//                  the forward's and the read's times leave out. Absent in
//                  profiles written before it.
//   frozen_layers  an integer >= 1
//
// Each sample is one measurement (or one mean of repeats: the fitter does not
// care which); repeated points are fine and simply weigh more.
//
// Errors name the source, the JSON path, what was expected and what was
// found, e.g. `p.json: compute[3].seconds: expected a number > 0, found "abc"`.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace ep {

inline constexpr std::string_view kProfileSchema = "elasticpipe.profile/1";

struct ComputeSample {
  std::string sublayer_kind;  // "stem" | "attention" | "mlp" | "head"
  std::string op;             // "forward" | "forward_again" | "backward" | "frozen_forward" | "backward_input"
  int samples = 0;            // micro-batch size
  double seconds = 0;
};

struct ChainSample {  // the whole model as one chain
  std::string op;       // as ComputeSample::op, but for backward_input
  int samples = 0;
  double seconds = 0;
};

struct TransferSample {  // point to point
  double bytes = 0;
  double seconds = 0;
};

struct AllReduceSample {
  double bytes = 0;
  int ranks = 0;
  double seconds = 0;
};

struct CacheSample {
  std::string tier;  // "host" | "disk"
  std::string op;    // "read" | "write"
  double bytes = 0;
  double seconds = 0;
};

struct OptimizerSample {
  double params = 0;
  double seconds = 0;
};

// One-off steps of a transition, measured whole: the cost model's
// transition terms (group_rebuild, state_pack_s, cache_create_s,
// cache_probe_setup_s, first_iteration_s, device_context_s, freeze_warmup_s).
struct TransitionSample {
  std::string what;  // e.g. "group_rebuild", "state_transfer"
  int ranks = 0;
  double bytes = 0;
  double seconds = 0;
};

struct CacheProbeSample {
  int frozen_layers = 0;
  int samples = 0;  // the batch
  double seconds = 0;
};

struct Profile {
  std::string environment;  // free text: host, cores, device, libtorch ...
  std::string model;        // free text describing the model shape profiled
  std::vector<ComputeSample> compute;
  std::vector<ChainSample> model_chain;
  std::vector<TransferSample> p2p;
  std::vector<AllReduceSample> allreduce;
  std::vector<CacheSample> cache;
  std::vector<OptimizerSample> optimizer;
  std::vector<OptimizerSample> grad_norms;
  std::vector<TransitionSample> transitions;
  std::vector<CacheProbeSample> cache_probes;
};

// TransitionSample::what of creating a cache file in tier "host" or "disk".
[[nodiscard]] inline std::string cache_create_what(std::string_view tier) { return "cache_create_" + std::string(tier); }
// TransitionSample::what of setting AutoCache's probe up (bytes: a batch's rows).
inline constexpr const char* kCacheProbeSetupWhat = "cache_probe_setup";
// TransitionSample::what of the run's start over its iterations' later
// time (bytes 0): what a process pays once, in its start (predict_start)
// and, woken, in its first iteration (predict_transition).
inline constexpr const char* kFirstIterationWhat = "first_iteration";
// TransitionSample::what of a process's first touch of its device, to the
// device's finish (bytes 0): its context created (CostModel::device_context_s).
inline constexpr const char* kDeviceContextWhat = "device_context";
// TransitionSample::what of a freeze step's first iteration over its later
// ones (bytes 0): the warm-up a step that freezes or repartitions pays
// (CostModel::freeze_warmup_s).
inline constexpr const char* kFreezeWarmupWhat = "freeze_warmup";

struct Config;  // planner/config.hpp

// How a profile names what it was recorded on (Profile::model): the model
// family and the shapes its compute timings depend on, the precision and
// the device, e.g. "vit L=4 H=64 heads=4 I=256 image=32/8, fp32 on cpu".
[[nodiscard]] std::string profile_model(const Config&);
// A profile's compute fits hold for what it was recorded on only (a fitted
// model would otherwise time another model, precision or device with
// them): throws ep::Error naming both files and both when `config` trains
// another.
void check_profile_model(const Profile&, const std::string& profile_source, const Config& config);

[[nodiscard]] nlohmann::json to_json(const Profile&);
// `source` prefixes every error (a file path, or "profile" for one built in
// code). Checks everything the format above promises.
[[nodiscard]] Profile parse_profile(const nlohmann::json&, const std::string& source);
// The checks of parse_profile, for a profile built in code: throws the error
// its JSON would get.
void check_profile(const Profile&, const std::string& source);
// Refuses a profile that would not read back (checked before writing).
void write_profile(const Profile&, const std::string& path);
[[nodiscard]] Profile read_profile(const std::string& path);

}  // namespace ep
