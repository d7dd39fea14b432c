// A model as the planner sees it: an ordered list of sublayers (SPEC §1)
//   stem, att.0, mlp.0, ..., att.{L-1}, mlp.{L-1}, head
// each with its parameter count, FLOPs, and activation sizes per sample.
// Partition boundaries fall only between sublayers, so every quantity the
// partitioner, the memory model and the cost models need is here.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "planner/config.hpp"

namespace ep {

enum class SublayerKind { Stem, Attention, Mlp, Head };

std::string to_string(SublayerKind);
std::ostream& operator<<(std::ostream&, SublayerKind);

struct Sublayer {
  SublayerKind kind = SublayerKind::Stem;
  int layer = -1;    // Transformer layer for Attention/Mlp; -1 for the stem; L for the head
  std::string name;  // "stem", "att.3", "mlp.3", "head" (the executor's names too)
  double params = 0;
  double fwd_flops_per_sample = 0;  // multiply-add = 2 FLOPs
  double bwd_flops_per_sample = 0;  // input and weight gradients, no recompute
  // Bytes crossing a partition boundary placed right after this sublayer.
  double out_activation_bytes_per_sample = 0;
  // Bytes autograd keeps for backward while the sublayer is active and not
  // recomputed.
  double saved_activation_bytes_per_sample = 0;
  // The input's gradient alone, without the weights' (a layer frozen
  // inside, decision 0037): bwd less one matrix product per weight matrix.
  double bwd_input_flops_per_sample = 0;
};

std::ostream& operator<<(std::ostream&, const Sublayer&);

// Half-open range [first, last) of sublayer indices.
struct SublayerRange {
  int first = 0;
  int last = 0;

  [[nodiscard]] int size() const { return last > first ? last - first : 0; }
  [[nodiscard]] bool empty() const { return size() == 0; }
  friend bool operator==(SublayerRange, SublayerRange) = default;
};

std::ostream& operator<<(std::ostream&, SublayerRange);

struct ModelSpec {
  ModelConfig config;
  Precision precision = Precision::FP32;
  // Bytes of one sample as the data loader hands it to the stem: FP32 pixels
  // for ViT, int64 token ids (plus token types) for BERT.
  double input_bytes_per_sample = 0;
  std::vector<Sublayer> sublayers;

  [[nodiscard]] int num_layers() const { return config.num_hidden_layers; }
  [[nodiscard]] int num_sublayers() const { return static_cast<int>(sublayers.size()); }
  [[nodiscard]] int head_sublayer() const { return num_sublayers() - 1; }
  [[nodiscard]] static int first_sublayer_of_layer(int layer) { return 1 + 2 * layer; }
  // Stem and layers 0 … num_layers−1: the frozen model F_frozen.
  [[nodiscard]] static SublayerRange frozen_prefix(int num_frozen_layers) {
    return {0, num_frozen_layers > 0 ? first_sublayer_of_layer(num_frozen_layers) : 0};
  }
  [[nodiscard]] double total_params() const;
  [[nodiscard]] double params(SublayerRange) const;
  // What enters sublayer `index`: the previous sublayer's output, or the
  // loader's sample for the stem.
  [[nodiscard]] double input_bytes_per_sample_of(int index) const;
};

// Bytes per activation element: 4 for FP32, 2 for BF16 autocast.
[[nodiscard]] double activation_element_bytes(Precision);

// Trusts a validated config (config.cpp).
[[nodiscard]] ModelSpec build_model_spec(const ModelConfig&, Precision);

}  // namespace ep
