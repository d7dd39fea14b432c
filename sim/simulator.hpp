// The SimGrid back end: runs the planner's lowered schedules on a simulated
// cluster (sim/platform.hpp) and reports what they cost. Compute durations
// come from the planner's CostModel (IterationCosts::duration); transfers,
// all-reduces and cache IO move IterationCosts::bytes over the simulated
// network (disks are links too), so contention and topology are SimGrid's.
//
// Semantics of one run (the planner's `simulate`, schedule.hpp):
// - one actor per (replica, device) runs the device's list in order, every
//   replica the same schedule; iteration i+1 starts on a device when it has
//   finished iteration i;
// - F, B, FZ, OPT: the action's duration of compute on the GPU host;
// - SEND: asynchronous (posting it takes no time); RECV: waits for its SEND
//   to be posted, then the transfer runs GPU to GPU and the receiver waits
//   for it (a rendezvous, as NCCL p2p). As in the planner's Timeline, the
//   RECV's span (and p2p_s) is the transfer, from the rendezvous on; the
//   wait for the sender before it is idle time. A SEND's span runs from
//   its posting to the end of its transfer;
// - AR(s, b): issued to the device's collective lane (a second actor),
//   which serialises the device's all-reduces in list order while compute
//   goes on; each is a ring all-reduce over the replicas' devices hosting
//   stage s in replica-rank order. How it moves is the request's
//   collective model (sim/collectives.hpp); built in: steps: 2(n-1) steps, each sending
//   bytes/n to the next rank while receiving from the previous one;
//   phases: a reduce-scatter and an all-gather, each one flow of
//   (n-1)·bytes/n to the next rank, then the latency of the phase's other
//   n-2 steps on its route; analytic: no flow, 2(n-1)·(latency +
//   bytes/n / bandwidth) of the route from the previous rank, its slowest
//   link's bandwidth (n = 1: nothing);
// - replicas stand for each other (models where two nodes stand for all:
//   phases, analytic): when every node holds
//   the same replicas (the same local GPUs) and the ring visits nodes one
//   after another, only the ring's first two nodes are simulated, their
//   rings closed between the two and each all-reduce still of all n ranks
//   (bytes/n, n-1 steps per phase). Each node then sends and receives the
//   same flows as in the whole ring, so every result below is the whole
//   run's; a trace holds those two nodes. Where a hop across leaf switches
//   differs from one within a leaf (Platform::alike_nodes), two leaves'
//   nodes stand for all instead. steps always simulates every replica;
// - OPT(s) waits for this iteration's all-reduces of stage s on the device;
// - CR: host memory (disk tier: the disk, streamed through it) -> GPU; CW:
//   GPU -> host memory (disk); each at most at the rate the cost model
//   gives it alone, bytes / IterationCosts::alone, so that a profile's
//   measured copy is the simulated one's speed while the node's GPUs
//   share its links. Stored behind the device (cache_writes_behind): the
//   device queues the transfer and goes on, waiting only while
//   kCacheWritesInFlight of its writes are still being stored
//   (cache_policy.hpp); the last ones land after its last iteration ends.
//   Read ahead (cache_reads_ahead): the device's reader copies an
//   iteration's CRs, in order, once the device has begun the iteration
//   before (the first at once), and a CR waits only for its copy to land;
// - zero-byte transfers, all-reduces and cache IO take no time (no latency);
//   a zero-byte RECV still waits for its SEND.
// Every run happens in a forked child starting at simulated time 0
// (sim/isolate.hpp), so the same request always gives the same doubles and
// trace times are relative to the run's start: each run starts at 0.
// run, run_batch and run_transfers may be called from several threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "planner/autopipe.hpp"
#include "planner/config.hpp"
#include "planner/cost_model.hpp"
#include "planner/schedule.hpp"
#include "traces/trace.hpp"

namespace ep::sim {

struct SimRequest {
  Schedule schedule;                           // lowered; every replica runs the same one
  IterationCosts costs;                        // duration: F, B, FZ, OPT; bytes: transfers, AR buckets, cache IO;
                                               // alone: CR, CW's rate bound (absent or 0: none)
  std::vector<std::vector<int>> replica_gpus;  // per replica: schedule device d -> global GPU id (node * I + gpu)
  std::vector<int> replica_rank;               // per replica: its global rank; empty = 0, 1, ...
  CacheTier cache_tier = CacheTier::HostMemory;
  bool cache_writes_behind = false;            // IterationSetup::cache_writes_behind
  bool cache_reads_ahead = false;              // IterationSetup::cache_reads_ahead
  std::string collectives = "steps";           // a registered collective model (sim/collectives.hpp)
  bool every_replica = false;                  // phases, analytic: no two nodes standing for all (tests compare)
  int iterations = 1;                          // back to back
  int plan_id = -1;                            // copied into trace events
};

struct SimResult {
  std::vector<double> iteration_end_s;  // per iteration: when its last device (any replica) finished it
  double compute_s = 0;    // per device per iteration, mean over devices: F, B, FZ, OPT
  double allreduce_s = 0;  // per device per iteration, mean: its all-reduce spans (serialised, so their union)
  double p2p_s = 0;        // per device per iteration, mean: time in receives (their transfers)
  double cache_io_s = 0;   // per iteration on stage-0 devices, mean: cache reads and writes (behind: the waits for the writer)
  // When the cache writes queued behind the devices had all landed, at or
  // after the last iteration's end: the executor waits for them (flush)
  // before it ends an epoch.
  double drained_s = 0;

  // The last iteration's end over the number of iterations.
  [[nodiscard]] double mean_iteration_s() const {
    return iteration_end_s.empty() ? 0 : iteration_end_s.back() / static_cast<double>(iteration_end_s.size());
  }
};

class Simulator {
 public:
  // Builds the SimGrid engine and platform. SimGrid allows one engine per
  // process, so a second Simulator in a process throws ep::Error.
  explicit Simulator(const ClusterSpec&);
  ~Simulator();
  Simulator(const Simulator&) = delete;
  Simulator& operator=(const Simulator&) = delete;

  // Throws ep::Error for an invalid request (schedule, GPU map, ranks,
  // costs) before anything runs. With a trace: one event per executed
  // action per replica and iteration on its GPU's track (Track{Gpu, node,
  // gpu, "gpu<g>"}; all-reduces at their lane times), SEND.flow_out ==
  // RECV.flow_in, and one event per link a transfer or ring step crosses
  // on that link's track (platform.hpp names them). Event::iteration is the
  // iteration index within this run.
  SimResult run(const SimRequest&, trace::Trace* trace = nullptr);
  // Runs up to `jobs` at once (each in its own process; `jobs` bounds the
  // runs of every thread calling together); results in request order, each
  // the same as run() would give. With `traces`, request i is
  // traced into (*traces)[i], a fresh trace (flow ids from 1).
  std::vector<SimResult> run_batch(const std::vector<SimRequest>&, int jobs,
                                   std::vector<trace::Trace>* traces = nullptr);
  // What the request's result depends on, as 32 hex digits: a digest of
  // the validated run the child is sent (every action's time and bytes,
  // the ranks' ring, the collective model, the cache's switches; not
  // plan_id, which names trace events only). Equal keys, equal results
  // (the driver's memo). Throws as run() would for an invalid request.
  [[nodiscard]] std::string request_key(const SimRequest&) const;

  // Transfers started together (moving weights, onboarding a replica);
  // returns when the last ends, in seconds. Transfers of zero bytes or to
  // the same GPU are free. Traced as one "transition" span per transfer on
  // the destination GPU's track, named `label` ("transfer" when empty),
  // plus its link events.
  struct Transfer {
    int src_gpu = 0;
    int dst_gpu = 0;
    double bytes = 0;
  };
  double run_transfers(const std::vector<Transfer>&, trace::Trace* trace = nullptr,
                       const std::string& label = "");

  [[nodiscard]] const ClusterSpec& cluster() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ep::sim
