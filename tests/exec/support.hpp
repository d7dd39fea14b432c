// Shared fixtures of the executor tests: a tiny model and an optimizer
// whose results stay comparable across schedules and replicas.
#pragma once

#include "exec/pipeline.hpp"
#include "planner/config.hpp"
#include "planner/iteration.hpp"

namespace ep::exec::testing {

// A whole training config small enough to train in a second: the tiny ViT
// on synthetic data, K = 4 on one node.
inline constexpr const char* kTiny = R"(
[cluster]
name = "test"
nodes = 1
gpus_per_node = 4
[cluster.device]
peak_flops_per_s = 50e9
memory_bytes = 4e9
memory_bandwidth_bytes_per_s = 10e9
[cluster.intra_node]
bandwidth_bytes_per_s = 5e9
latency_s = 20e-6
[cluster.inter_node]
bandwidth_bytes_per_s = 1e9
latency_s = 50e-6
[cluster.host]
memory_bytes = 2e9
memory_bandwidth_bytes_per_s = 5e9
disk_bandwidth_bytes_per_s = 500e6
[model]
family = "vit"
num_hidden_layers = 4
hidden_size = 16
intermediate_size = 32
num_attention_heads = 2
image_size = 8
patch_size = 4
num_channels = 1
num_labels = 4
[data]
name = "synthetic-images"
num_train_samples = 240
num_test_samples = 64
[training]
epochs = 3
batch_size = 16
optimizer = "adamw"
lr = 3e-3
seed = 3
checkpointing = "never"
[planner]
alpha = 0.5
freeze_policy = "gradient_norm"
partitioner = "optimal"
compression = "memory"
K = 4
M_max_factor = 2
cache = "off"
schedule = "1f1b"
autodp = false
[exec]
threads_per_worker = 1
)";


inline ModelConfig tiny(ModelFamily family) {
  ModelConfig m;
  m.family = family;
  m.num_hidden_layers = 4;
  m.hidden_size = 16;
  m.intermediate_size = 32;
  m.num_attention_heads = 2;
  m.num_labels = 5;
  if (family == ModelFamily::ViT) {
    m.image_size = 8;
    m.patch_size = 4;
    m.num_channels = 1;
  } else {
    m.seq_length = 6;
    m.vocab_size = 30;
    m.max_position_embeddings = 8;
  }
  return m;
}

// SGD with momentum: its state (the momentum buffer) must survive a
// transition, and unlike Adam it does not turn 1e-7 gradient noise on a
// near-zero gradient into a full-size step, so weights stay comparable.
inline TrainingConfig sgd() {
  TrainingConfig t;
  t.optimizer = ep::Optimizer::SGD;
  t.lr = 0.05;
  t.momentum = 0.9;
  t.weight_decay = 0.01;
  t.batch_size = 12;
  return t;
}

// `kind` with momentum and weight decay both in play: the optimizer tests'
// settings, so every term of each update rule is checked.
inline TrainingConfig update_rule(ep::Optimizer kind) {
  TrainingConfig t;
  t.optimizer = kind;
  t.lr = 0.01;
  t.momentum = 0.9;
  t.weight_decay = 0.05;
  return t;
}

// x and y cut into M micro-batches of micro_batch_sizes, weight 1 each,
// keyed by their row.
inline std::vector<MicroBatch> split(const at::Tensor& x, const at::Tensor& y, int M) {
  std::vector<MicroBatch> out;
  std::int64_t at = 0;
  for (const int n : micro_batch_sizes(static_cast<int>(x.size(0)), M)) {
    MicroBatch mb(x.narrow(0, at, n), y.narrow(0, at, n), at::ones({n}));
    for (int i = 0; i < n; ++i) mb.indices.push_back(at + i);
    out.push_back(mb);
    at += n;
  }
  return out;
}

// A hand-built schedule as the program the pipeline runs: one intra-op
// thread per worker, the recomputation `ckpt` implies, the cache depth as
// IterationSetup::cache_valid_layers.
inline IterationProgram program_of(Schedule s, Checkpointing ckpt = Checkpointing::Never, int cache_valid_layers = -1) {
  IterationProgram p;
  p.setup.K = s.K;
  p.setup.v = s.v;
  p.setup.M = s.M;
  p.setup.cache_valid_layers = cache_valid_layers;
  p.setup.grad_norms = true;  // as under the gradient-norm policy: the tests read them
  p.recomputed_microbatches = recomputed_microbatches(ckpt, s.M);
  p.threads = {1};
  p.schedule = std::move(s);
  return p;
}

}  // namespace ep::exec::testing
