// Fixtures shared by the planner tests: the shipped configs and the model
// shapes of the paper, built once here rather than copied per test file.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>

#include "planner/config.hpp"
#include "planner/error.hpp"
#include "planner/schedule.hpp"
#include "tests/temp_dir.hpp"

namespace ep::test {

// The message of the ep::Error `f` throws; "" when it throws none.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

inline std::string repo_path(const std::string& relative) {
  return (std::filesystem::path(EP_SOURCE_DIR) / relative).string();
}

// configs/paper/NAME.toml
inline Config paper_config(const std::string& name, const Overrides& o = {}) {
  return load_config(repo_path("configs/paper/" + name + ".toml"), o);
}

// configs/small/tiny_bert_synthetic.toml: L = 4 on a 1 x 4 cluster.
inline Config tiny_bert(const Overrides& o = {}) {
  return load_config(repo_path("configs/small/tiny_bert_synthetic.toml"), o);
}

inline ModelConfig vit_b16() {
  ModelConfig m;
  m.family = ModelFamily::ViT;
  m.num_hidden_layers = 12;
  m.hidden_size = 768;
  m.intermediate_size = 3072;
  m.num_attention_heads = 12;
  m.num_labels = 1000;
  m.image_size = 224;
  m.patch_size = 16;
  m.num_channels = 3;
  return m;
}

// BERT with uncased-vocabulary embeddings, sequence length 128.
inline ModelConfig bert(int layers, int hidden, int intermediate, int heads) {
  ModelConfig m;
  m.family = ModelFamily::Bert;
  m.num_hidden_layers = layers;
  m.hidden_size = hidden;
  m.intermediate_size = intermediate;
  m.num_attention_heads = heads;
  m.num_labels = 2;
  m.seq_length = 128;
  m.vocab_size = 30522;
  m.max_position_embeddings = 512;
  m.type_vocab_size = 2;
  return m;
}

inline ScheduleOptions schedule(ScheduleKind kind, int K, int M, int v = 1) {
  ScheduleOptions o;
  o.kind = kind;
  o.K = K;
  o.M = M;
  o.v = v;
  return o;
}

// A small random, valid ViT or BERT.
inline ModelConfig random_model(std::mt19937& rng) {
  ModelConfig m;
  m.family = rng() % 2 ? ModelFamily::ViT : ModelFamily::Bert;
  m.num_hidden_layers = 1 + static_cast<int>(rng() % 12);
  m.num_attention_heads = 1 << (rng() % 4);
  m.hidden_size = m.num_attention_heads * 8 * (1 + static_cast<int>(rng() % 8));
  m.intermediate_size = m.hidden_size * (1 + static_cast<int>(rng() % 4));
  m.num_labels = 1 + static_cast<int>(rng() % 100);
  if (m.family == ModelFamily::ViT) {
    m.patch_size = 1 << (1 + rng() % 4);
    m.image_size = m.patch_size * (1 + static_cast<int>(rng() % 8));
    m.num_channels = 1 + static_cast<int>(rng() % 3);
  } else {
    m.seq_length = 1 + static_cast<int>(rng() % 64);
    m.vocab_size = 10 + static_cast<int>(rng() % 5000);
    m.max_position_embeddings = m.seq_length;
  }
  return m;
}

}  // namespace ep::test
