// `elasticpipe profile`: the measurements a fitted CostModel needs, taken on
// the real executor of this machine (planner/profile.hpp has the format):
//   - per sublayer kind (stem, attention, mlp, head; the Transformer layers
//     are identical, so a chain of the first few stands for all) forward
//     with autograd, backward, and forward without autograd (F_frozen), for
//     micro-batch sizes 1, 2, 4, … up to the batch, on the configured device
//     (exec.device; refused when this process cannot use it) at the training
//     precision, timed by that device's events;
//   - a point-to-point hand-over between two stage workers against bytes
//     (on CPU the pipeline's mailbox between threads; on CUDA a copy to the
//     second GPU, when one is visible);
//   - sum all-reduce on Gloo against bytes and ranks, ranks as threads of
//     this process on loopback; on CUDA NCCL with one rank per visible GPU
//     (none with one GPU: the cost model's analytic all-reduce stands in);
//   - activation-cache reads (into the device) and writes (from it) against
//     bytes, host and disk tier;
//   - optimizer steps against parameter count;
//   - transition costs: active-group rebuild against ranks, state
//     pack + unpack against bytes.
// Every figure is the median of `repeats` timed runs after one warm-up
// (exec/timing.hpp).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "planner/autopipe.hpp"
#include "planner/config.hpp"
#include "planner/profile.hpp"
#include "planner/validation.hpp"

namespace ep::exec {

struct ProfileOptions {
  int repeats = 5;
  int threads = 0;  // intra-op threads for compute; 0: cores / K0 (as a stage worker of the first plan)
  std::function<void(const std::string&)> log;
};

[[nodiscard]] Profile profile_executor(const Config& config, const ProfileOptions& options);

// The measured side of `elasticpipe validate`: each plan's program run for
// real, its replicas as threads of this process with Gloo ranks on
// loopback (the same all-reduce code and core sharing as one process per
// replica), `iterations` timed after one warm-up (and its fill program
// first when it reads the cache): the slowest replica's median seconds per
// iteration, and its host's median time queuing one (the pipeline's launch,
// every action queued: on a GPU, where that nears the iteration the host
// paces the plan; on a CPU the host runs the work there). Refused before
// any work: a device this process cannot use, and on CUDA plans whose
// stages and replicas would share a GPU (they would time something no plan
// describes).
struct MeasuredIterations {
  double seconds = 0;
  double queue_s = 0;
};
[[nodiscard]] std::vector<MeasuredIterations> measure_iterations(const Config& config,
                                                                 const std::vector<ValidationPlan>& plans,
                                                                 int iterations);

}  // namespace ep::exec
