// Shared fixtures of the executor tests: a tiny model and an optimizer
// whose results stay comparable across schedules and replicas.
#pragma once

#include "planner/config.hpp"

namespace ep::exec::testing {

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

}  // namespace ep::exec::testing
