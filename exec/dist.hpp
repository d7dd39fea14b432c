// Data parallelism across processes on c10d (Gloo on CPU; NCCL on a CUDA
// LibTorch built with ELASTICPIPE_CUDA). Two kinds of group:
//   - the static message group over all processes, never rebuilt: a
//     TCPStore hosted by rank 0 for control messages (a process that is not
//     training waits on a store key, holding no collective open, so its wait
//     may last an epoch) plus a Gloo group for state transfers and barriers;
//   - the active training group over the active processes only, torn down
//     and rebuilt at each transition. It is one Gloo/NCCL group per pipeline
//     device lane k: lane k's stage worker issues its all-reduces in its
//     schedule order, identical on every replica, while the K workers of a
//     process run concurrently, so one shared group would see them in a
//     racy order.
// Every collective has the configured timeout; on Gloo a failure names the
// rank, the operation and the group instead of hanging; on NCCL c10d's
// watchdog aborts the process past the timeout (see PendingReduce::wait).
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "exec/launch.hpp"
#include "exec/pipeline.hpp"

namespace ep::exec {

class Dist final : public GradientReducer {
 public:
  // Connects to (rank 0: hosts) the TCPStore at MASTER_ADDR:MASTER_PORT and
  // builds the static message group. Throws ep::Error naming the rank.
  Dist(const ProcessEnv& env, std::chrono::milliseconds timeout);
  ~Dist() override;
  Dist(const Dist&) = delete;
  Dist& operator=(const Dist&) = delete;

  [[nodiscard]] int rank() const { return env_.rank; }
  [[nodiscard]] int world_size() const { return env_.world_size; }
  [[nodiscard]] std::chrono::milliseconds timeout() const { return timeout_; }

  // Control message `key`: rank 0 passes the value and publishes it; every
  // other rank waits for it (without a time limit: the launcher brings the
  // job down when rank 0 dies, and the store connection fails with it).
  nlohmann::json control(const std::string& key, const nlohmann::json& value = {});

  // Static group: all ranks.
  void barrier(const std::string& what);
  // Every rank's `mine` (the same length on every rank), rank by rank.
  [[nodiscard]] std::vector<std::int64_t> all_gather(std::span<const std::int64_t> mine, const std::string& what);
  void send_bytes(std::span<const std::uint8_t> bytes, int dst, int tag, const std::string& what);
  [[nodiscard]] std::vector<std::uint8_t> recv_bytes(int src, int tag, const std::string& what);

  // Rebuilds the active training group over `active_ranks` (sorted) with
  // `lanes` lanes; generation numbers make the store keys of successive
  // groups distinct. Only the ranks in active_ranks may call it, all of
  // them. A lane whose device (lane_devices[k]) is CUDA uses NCCL, else
  // Gloo. Returns the seconds it took.
  double rebuild_active(int generation, const std::vector<int>& active_ranks, int lanes,
                        const std::vector<at::Device>& lane_devices = {});

  // GradientReducer: sum all-reduce of `flat` on lane `lane` of the active group.
  std::shared_ptr<PendingReduce> allreduce(int lane, at::Tensor flat, const std::string& what) override;
  // Blocking sum all-reduce on lane 0 of the active group (small tensors:
  // norms, checks).
  void allreduce_now(at::Tensor& t, const std::string& what);

 private:
  struct Impl;  // c10d stays out of this header
  ProcessEnv env_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<Impl> impl_;
  std::vector<int> active_ranks_;
};

// Transient failures of one c10d operation as an ep::Error:
// "rank 2: all-reduce of stage 1 bucket 0 (lane 1, active group 3 of ranks 0,1,2,3) failed after 5.0 s: <c10d's reason>".
[[nodiscard]] std::string describe_collective_failure(int rank, const std::string& what, double seconds,
                                                      const std::string& reason);

}  // namespace ep::exec
