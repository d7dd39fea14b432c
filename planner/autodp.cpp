#include "planner/autodp.hpp"

#include "planner/random.hpp"

#include <algorithm>
#include <iterator>
#include <ostream>
#include <string>
#include <utility>

namespace ep {
namespace {

void check_cluster(const ClusterSpec& c, const char* fn) {
  if (c.nodes < 1 || c.gpus_per_node < 1) {
    throw Error(std::string(fn) + ": cluster needs nodes >= 1 and gpus_per_node >= 1, found " +
                std::to_string(c.nodes) + " x " + std::to_string(c.gpus_per_node));
  }
}

// Callers have checked: per_node divides I and 1 <= K <= I / per_node.
ReplicaLayout make_layout(const ClusterSpec& c, int K, int per_node) {
  const int I = c.gpus_per_node;
  const int stride = I / per_node;
  ReplicaLayout l{.K = K,
                  .nodes = c.nodes,
                  .gpus_per_node = I,
                  .pipelines_per_node = per_node,
                  .replicas = c.nodes * per_node,
                  .active_ranks = {},
                  .replica = {}};
  for (int n = 0; n < c.nodes; ++n) {
    for (int j = 0; j < per_node; ++j) {
      ReplicaLayout::Replica r{.rank = n * I + j, .node = n, .local_rank = j, .gpus = {}};
      for (int s = 0; s < K; ++s) r.gpus.push_back(n * I + j * stride + s);
      l.active_ranks.push_back(r.rank);
      l.replica.push_back(std::move(r));
    }
  }
  return l;
}

void check_spec(const SamplerSpec& s) {
  if (s.dataset_size < 1 || s.nodes < 1) {
    throw Error("sampler: needs dataset_size >= 1 and nodes >= 1, found dataset_size = " +
                std::to_string(s.dataset_size) + ", nodes = " + std::to_string(s.nodes));
  }
}

void check_node(const SamplerSpec& s, int node) {
  check_spec(s);
  if (node < 0 || node >= s.nodes) {
    throw Error("sampler: node " + std::to_string(node) + " out of range [0, " +
                std::to_string(s.nodes) + ")");
  }
}

// Slots one iteration consumes per node.
std::int64_t step_slots(int local_replicas, int batch) {
  if (local_replicas < 1 || batch < 1) {
    throw Error("sampler: needs local_replicas >= 1 and batch >= 1, found " +
                std::to_string(local_replicas) + " and " + std::to_string(batch));
  }
  return std::int64_t{local_replicas} * batch;
}

void check_consumed(std::int64_t consumed, std::int64_t slots) {
  if (consumed < 0 || consumed > slots) {
    throw Error("sampler: consumed = " + std::to_string(consumed) + " outside [0, " +
                std::to_string(slots) + "]");
  }
}


}  // namespace

std::vector<int> ReplicaLayout::newly_active(const ReplicaLayout& previous) const {
  if (previous.nodes != nodes || previous.gpus_per_node != gpus_per_node) {
    throw Error("newly_active: layouts of different clusters (" + std::to_string(previous.nodes) +
                " x " + std::to_string(previous.gpus_per_node) + " vs " + std::to_string(nodes) +
                " x " + std::to_string(gpus_per_node) + ")");
  }
  std::vector<int> out;
  std::set_difference(active_ranks.begin(), active_ranks.end(), previous.active_ranks.begin(),
                      previous.active_ranks.end(), std::back_inserter(out));
  return out;
}

ReplicaLayout autodp_layout(const ClusterSpec& cluster, int K) {
  check_cluster(cluster, "autodp_layout");
  const int I = cluster.gpus_per_node;
  if (K < 1 || K > I || I % K != 0) {
    throw Error("autodp_layout: pipeline length K = " + std::to_string(K) +
                " must divide gpus_per_node = " + std::to_string(I));
  }
  return make_layout(cluster, K, I / K);
}

ReplicaLayout fixed_replicas_layout(const ClusterSpec& cluster, int K, int K0) {
  check_cluster(cluster, "fixed_replicas_layout");
  const int I = cluster.gpus_per_node;
  if (K0 < 1 || K0 > I || I % K0 != 0) {
    throw Error("fixed_replicas_layout: initial pipeline length K0 = " + std::to_string(K0) +
                " must divide gpus_per_node = " + std::to_string(I));
  }
  if (K < 1 || K > K0) {
    throw Error("fixed_replicas_layout: pipeline length K = " + std::to_string(K) +
                " must lie in [1, K0 = " + std::to_string(K0) + "]");
  }
  return make_layout(cluster, K, I / K0);
}

std::ostream& operator<<(std::ostream& os, const ReplicaLayout::Replica& r) {
  os << "{rank " << r.rank << ", node " << r.node << ", local " << r.local_rank << ", gpus [";
  for (std::size_t s = 0; s < r.gpus.size(); ++s) os << (s ? " " : "") << r.gpus[s];
  return os << "]}";
}

std::ostream& operator<<(std::ostream& os, const ReplicaLayout& l) {
  os << "ReplicaLayout{K " << l.K << ", " << l.nodes << " x " << l.gpus_per_node << ", "
     << l.pipelines_per_node << " pipelines/node, " << l.replicas << " replicas:";
  for (const auto& r : l.replica) os << ' ' << r;
  return os << '}';
}

Shard node_shard(const SamplerSpec& spec, int node) {
  check_node(spec, node);
  const std::int64_t base = spec.dataset_size / spec.nodes;
  const std::int64_t extra = spec.dataset_size % spec.nodes;
  const std::int64_t begin = node * base + std::min<std::int64_t>(node, extra);
  return {begin, begin + base + (node < extra ? 1 : 0)};
}

std::int64_t shard_slots(const SamplerSpec& spec) {
  check_spec(spec);
  return (spec.dataset_size + spec.nodes - 1) / spec.nodes;
}

std::vector<std::int64_t> node_order(const SamplerSpec& spec, int node, int epoch) {
  const Shard shard = node_shard(spec, node);
  if (epoch < 0) throw Error("sampler: epoch = " + std::to_string(epoch) + " is negative");
  std::vector<std::int64_t> order(static_cast<std::size_t>(shard_slots(spec)), -1);
  for (std::int64_t i = 0; i < shard.size(); ++i) order[i] = shard.begin + i;
  SplitMix64 rng(mix64(mix64(mix64(spec.seed) ^ static_cast<std::uint64_t>(epoch)) ^
                       static_cast<std::uint64_t>(node)));
  for (std::int64_t i = shard.size() - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(i) + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

std::vector<std::int64_t> replica_batch(std::span<const std::int64_t> order, std::int64_t consumed,
                                        int local_replicas, int local_rank, int batch) {
  step_slots(local_replicas, batch);
  const auto slots = static_cast<std::int64_t>(order.size());
  check_consumed(consumed, slots);
  if (local_rank < 0 || local_rank >= local_replicas) {
    throw Error("sampler: local_rank " + std::to_string(local_rank) + " out of range [0, " +
                std::to_string(local_replicas) + ")");
  }
  std::vector<std::int64_t> out(static_cast<std::size_t>(batch), -1);
  const std::int64_t first = consumed + std::int64_t{local_rank} * batch;
  for (std::int64_t i = 0; i < batch && first + i < slots; ++i) out[i] = order[first + i];
  return out;
}

std::int64_t iterations_in_epoch(const SamplerSpec& spec, std::int64_t consumed,
                                 int local_replicas, int batch) {
  const std::int64_t step = step_slots(local_replicas, batch);
  const std::int64_t slots = shard_slots(spec);
  check_consumed(consumed, slots);
  return (slots - consumed + step - 1) / step;
}

std::int64_t iteration_real_samples(const SamplerSpec& spec, std::int64_t consumed,
                                    int local_replicas, int batch) {
  const std::int64_t step = step_slots(local_replicas, batch);
  check_consumed(consumed, shard_slots(spec));
  std::int64_t real = 0;
  for (int n = 0; n < spec.nodes; ++n) {
    // Real slots come first in a node's order.
    real += std::clamp<std::int64_t>(node_shard(spec, n).size() - consumed, 0, step);
  }
  return real;
}

std::int64_t padding_slots(const SamplerSpec& spec, int local_replicas, int batch) {
  return std::int64_t{spec.nodes} * iterations_in_epoch(spec, 0, local_replicas, batch) *
             step_slots(local_replicas, batch) -
         spec.dataset_size;
}

SamplerState advance(const SamplerSpec& spec, SamplerState state, int local_replicas, int batch) {
  const std::int64_t step = step_slots(local_replicas, batch);
  const std::int64_t slots = shard_slots(spec);
  check_consumed(state.consumed, slots);
  state.consumed += step;
  if (state.consumed >= slots) return {state.epoch + 1, 0};
  return state;
}

std::ostream& operator<<(std::ostream& os, const SamplerSpec& s) {
  return os << "SamplerSpec{dataset_size " << s.dataset_size << ", nodes " << s.nodes
            << ", seed " << s.seed << '}';
}

std::ostream& operator<<(std::ostream& os, const SamplerState& s) {
  return os << "SamplerState{epoch " << s.epoch << ", consumed " << s.consumed << '}';
}

std::ostream& operator<<(std::ostream& os, const Shard& s) {
  return os << "Shard[" << s.begin << ", " << s.end << ')';
}

}  // namespace ep
