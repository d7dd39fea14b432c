// AutoDP (SPEC §4): which processes drive pipelines for a pipeline length K,
// and the node-sharded sampler that keeps all replicas in lockstep and shows
// every sample exactly once per epoch, also across a change of the replica
// count in the middle of an epoch.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <span>
#include <vector>

#include "planner/config.hpp"

namespace ep {

// ---------------------------------------------------------------- layout
//
// Process model: one process per GPU; world size nodes * I (I =
// gpus_per_node); global rank = node * I + local index. On every node the
// first `pipelines_per_node` local indices are active, and active local index
// j drives the K GPUs of its node starting at GPU j * (I / pipelines_per_node).
// With AutoDP pipelines_per_node = I / K: the pipelines tile the node.
struct ReplicaLayout {
  struct Replica {
    int rank = 0;        // global process rank
    int node = 0;
    int local_rank = 0;  // index among the node's active pipelines
    std::vector<int> gpus;  // stage -> global GPU id (node * I + gpu)

    friend bool operator==(const Replica&, const Replica&) = default;
  };

  int K = 0;
  int nodes = 0;
  int gpus_per_node = 0;
  int pipelines_per_node = 0;
  int replicas = 0;               // data-parallel width: nodes * pipelines_per_node
  std::vector<int> active_ranks;  // sorted
  std::vector<Replica> replica;   // one per active rank, same order

  // Ranks active here but not in `previous`: the processes a transition
  // wakes. Throws ep::Error when the layouts belong to different clusters.
  [[nodiscard]] std::vector<int> newly_active(const ReplicaLayout& previous) const;

  friend bool operator==(const ReplicaLayout&, const ReplicaLayout&) = default;
};

// AutoDP on: I / K pipelines per node. K must divide I (the layout needs no
// power of two; halving K is compression's business). Throws ep::Error.
[[nodiscard]] ReplicaLayout autodp_layout(const ClusterSpec& cluster, int K);

// AutoDP off (ablation "freeze + AutoPipe"): the I / K0 pipelines per node of
// the initial layout keep running, each shrunk in place to the first K GPUs
// of its original block, so no process wakes and the replica count stays.
// K0 must divide I and 1 <= K <= K0. Throws ep::Error.
[[nodiscard]] ReplicaLayout fixed_replicas_layout(const ClusterSpec& cluster, int K, int K0);

std::ostream& operator<<(std::ostream& os, const ReplicaLayout::Replica& r);
std::ostream& operator<<(std::ostream& os, const ReplicaLayout& layout);

// ---------------------------------------------------------------- sampler
//
// Node n owns a fixed contiguous block of dataset indices (node_shard; sizes
// differ by at most one, the larger blocks first) and shuffles only inside
// it, anew every epoch, so the node's activation cache stays valid. Every
// node has shard_slots() slots per epoch: its shuffled shard followed by
// masked slots (-1) up to the largest shard size.
//
// An iteration consumes local_replicas * batch consecutive slots of every
// node's order (batch = samples per pipeline per iteration); local replica r
// takes the r-th `batch` of them; slots past the end of the order are masked
// as well. Every replica thus gets exactly `batch` slots per iteration. The
// state (epoch, consumed) is the same on every node, so when the replica
// count changes mid-epoch the rest of each node's order is simply split among
// the new replicas: still exactly once.
//
// Equal weight: a masked slot weighs 0. Each replica sums the losses of its
// real samples and divides by iteration_real_samples() (the real samples of
// the whole global batch); gradients are summed across replicas (with DDP's
// averaging all-reduce, multiply the loss by the replica count). Every real
// sample of an iteration then weighs the same, whatever replica it lands on.
//
// The shuffle is Fisher-Yates driven by splitmix64 seeded from (seed, epoch,
// node): no std:: distribution, so the order is the same on every platform.

struct SamplerSpec {
  std::int64_t dataset_size = 0;
  int nodes = 1;
  std::uint64_t seed = 0;

  friend bool operator==(const SamplerSpec&, const SamplerSpec&) = default;
};

// Where the sampler stands; what a checkpoint stores.
struct SamplerState {
  int epoch = 0;
  std::int64_t consumed = 0;  // slots of every node's order used this epoch

  friend bool operator==(const SamplerState&, const SamplerState&) = default;
};

// Dataset indices [begin, end).
struct Shard {
  std::int64_t begin = 0;
  std::int64_t end = 0;

  [[nodiscard]] std::int64_t size() const { return end - begin; }
  friend bool operator==(const Shard&, const Shard&) = default;
};

// All functions throw ep::Error for invalid arguments.
[[nodiscard]] Shard node_shard(const SamplerSpec& spec, int node);
// Slots per node and epoch, equal on all nodes: the largest shard size.
[[nodiscard]] std::int64_t shard_slots(const SamplerSpec& spec);
// The node's shard shuffled for `epoch`, padded with -1 to shard_slots().
[[nodiscard]] std::vector<std::int64_t> node_order(const SamplerSpec& spec, int node, int epoch);
// Slots [consumed + local_rank * batch, consumed + (local_rank + 1) * batch)
// of a node_order(); -1 past its end. 0 <= consumed <= order.size().
[[nodiscard]] std::vector<std::int64_t> replica_batch(std::span<const std::int64_t> order,
                                                      std::int64_t consumed, int local_replicas,
                                                      int local_rank, int batch);
// Iterations left in the epoch from `consumed` (the last one may be partly masked).
[[nodiscard]] std::int64_t iterations_in_epoch(const SamplerSpec& spec, std::int64_t consumed,
                                               int local_replicas, int batch);
// Real (unmasked) samples, over all nodes, of the iteration starting at `consumed`.
[[nodiscard]] std::int64_t iteration_real_samples(const SamplerSpec& spec, std::int64_t consumed,
                                                  int local_replicas, int batch);
// Masked slots, over all nodes, of an epoch without a transition.
[[nodiscard]] std::int64_t padding_slots(const SamplerSpec& spec, int local_replicas, int batch);
// The state after one iteration; past the last one, the next epoch's start.
[[nodiscard]] SamplerState advance(const SamplerSpec& spec, SamplerState state,
                                   int local_replicas, int batch);

std::ostream& operator<<(std::ostream& os, const SamplerSpec& spec);
std::ostream& operator<<(std::ostream& os, const SamplerState& state);
std::ostream& operator<<(std::ostream& os, const Shard& shard);

}  // namespace ep
