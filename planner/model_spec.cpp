#include "planner/model_spec.hpp"

#include <cassert>
#include <string>
#include <utility>

namespace ep {

namespace {

// What the FLOP counts include (per token unless noted; multiply-add = 2):
//   Linear in→out: 2·in·out (bias adds folded in); attention QKᵀ and A·V:
//   2·s·H each per token (2·s²·H per sample); elementwise work roughly:
//   LayerNorm 5 per element (mean, variance, normalise, scale, shift),
//   softmax 5 per score (max, subtract, exp, sum, divide) plus 1 for the
//   1/√d scaling, GELU or tanh 8 per element, residual add 1 per element.
//   Dropout, embedding lookups and the loss are not counted.
// Backward = 2× forward (input and weight gradients), except the stem,
// whose input (pixels or token ids) needs no gradient: 1× forward.
constexpr double kLayerNormFlops = 5;
constexpr double kSoftmaxFlops = 6;
constexpr double kActivationFlops = 8;
constexpr double kResidualFlops = 1;

constexpr double kPixelBytes = 4;    // the loader hands FP32 pixels
// What crosses a boundary between sublayers is the residual stream, and it
// stays FP32 under BF16 autocast: the stem adds FP32 position embeddings
// (BERT sums FP32 lookups and LayerNorms them, which autocast runs in FP32)
// and each block adds its BF16 output to it, which promotes. So a stage's
// output, a p2p message and a cached row hold 4 bytes per element whatever
// the precision (measured: the executor's boundary tensors, test_model).
constexpr double kResidualBytes = 4;
constexpr double kTokenIdBytes = 8;  // int64 ids
constexpr double kBertInputsPerToken = 3;  // input_ids, token_type_ids, attention_mask

struct Dims {
  double s, H, I, a, c;  // tokens, hidden, intermediate, heads, labels
  double e;              // bytes per activation element
};

Sublayer make(SublayerKind kind, int layer, std::string name, double params,
              double fwd_flops, double bwd_factor, double out_bytes,
              double saved_elements, double e, double weight_grad_flops = 0) {
  return {kind,      layer,           std::move(name),  params,
          fwd_flops, bwd_factor * fwd_flops, out_bytes, saved_elements * e,
          bwd_factor * fwd_flops - weight_grad_flops};
}

// Saved activations (elements per sample) follow what autograd keeps:
//   ATT: LayerNorm input, QKV input (= LN output), Q, K, V, output
//        projection input (the context) = 6·sh, plus softmax output and the
//        probabilities multiplied with V (the attention dropout output; the
//        same tensor when that dropout is 0, so an upper bound) = 2·as².
//   MLP: LayerNorm input, fc1 input, GELU input (fc1 output), fc2 input
//        (GELU output) = 2·sh + 2·s·I.
// Pre-LN (ViT) and post-LN (BERT) blocks keep the same counts: a post-LN
// block keeps its input (the QKV or fc1 input) and its LayerNorm input, and
// its LayerNorm output is kept by the next sublayer.
// Cross-check: Korthikanti et al. 2022, "Reducing Activation Recomputation
// in Large Transformer Models", §4.1: sbh(34 + 5as/h) bytes per layer in
// 16-bit, of which 2·sbh + as²b are 1-byte dropout masks (not counted here);
// the rest, 32·sbh + 4·as²b bytes, is 16·sh + 2·as² elements, which is our
// 8·sh + 2·s·I + 2·as² with I = 4h.
Sublayer attention(const Dims& d, int layer) {
  const double params = 3 * (d.H * d.H + d.H) + (d.H * d.H + d.H) + 2 * d.H;
  const double flops = kLayerNormFlops * d.s * d.H + 2 * d.s * d.H * 3 * d.H +
                       2 * 2 * d.s * d.s * d.H + kSoftmaxFlops * d.a * d.s * d.s +
                       2 * d.s * d.H * d.H + kResidualFlops * d.s * d.H;
  const double saved = 6 * d.s * d.H + 2 * d.a * d.s * d.s;
  // The four projections' weight gradients: one matrix product each.
  return make(SublayerKind::Attention, layer, "att." + std::to_string(layer), params,
              flops, 2, d.s * d.H * kResidualBytes, saved, d.e, 2 * d.s * 4 * d.H * d.H);
}

Sublayer mlp(const Dims& d, int layer) {
  const double params = (d.H * d.I + d.I) + (d.I * d.H + d.H) + 2 * d.H;
  const double flops = kLayerNormFlops * d.s * d.H + 2 * 2 * d.s * d.H * d.I +
                       kActivationFlops * d.s * d.I + kResidualFlops * d.s * d.H;
  const double saved = 2 * d.s * d.H + 2 * d.s * d.I;
  return make(SublayerKind::Mlp, layer, "mlp." + std::to_string(layer), params, flops,
              2, d.s * d.H * kResidualBytes, saved, d.e, 2 * 2 * d.s * d.H * d.I);
}

// ViT (HF ViTModel / timm vit_base_patch16_224): Conv2d patch embedding,
// class token, position embeddings; saves the conv input (the image).
Sublayer vit_stem(const ModelConfig& m, const Dims& d) {
  const double patch_in = static_cast<double>(m.num_channels) * m.patch_size * m.patch_size;
  const double image_elements = static_cast<double>(m.num_channels) * m.image_size * m.image_size;
  const double params = patch_in * d.H + d.H + d.H + d.s * d.H;
  const double flops = 2 * (d.s - 1) * patch_in * d.H + kResidualFlops * d.s * d.H;
  return make(SublayerKind::Stem, -1, "stem", params, flops, 1, d.s * d.H * kResidualBytes, image_elements, d.e);
}

// BERT (HF BertModel): word + position + token-type embeddings summed, then
// LayerNorm; saves the LayerNorm input.
Sublayer bert_stem(const ModelConfig& m, const Dims& d) {
  const double params =
      (static_cast<double>(m.vocab_size) + m.max_position_embeddings + m.type_vocab_size) * d.H +
      2 * d.H;
  const double flops = 2 * kResidualFlops * d.s * d.H + kLayerNormFlops * d.s * d.H;
  return make(SublayerKind::Stem, -1, "stem", params, flops, 1, d.s * d.H * kResidualBytes, d.s * d.H, d.e);
}

// ViT head: final LayerNorm over all tokens, classifier on the class token.
// Saves the LayerNorm input and output (the classifier's input is a view of
// it, which keeps the whole tensor) and the logits (for the loss).
Sublayer vit_head(const Dims& d, int num_layers) {
  const double params = 2 * d.H + d.H * d.c + d.c;
  const double flops = kLayerNormFlops * d.s * d.H + 2 * d.H * d.c;
  return make(SublayerKind::Head, num_layers, "head", params, flops, 2, d.c * d.e,
              2 * d.s * d.H + d.c, d.e);
}

// BERT head: pooler (dense + tanh on the [CLS] token) and classifier. Saves
// the sequence output (the pooler's input is a view of it), the tanh output
// and the logits.
Sublayer bert_head(const Dims& d, int num_layers) {
  const double params = (d.H * d.H + d.H) + (d.H * d.c + d.c);
  const double flops = 2 * d.H * d.H + kActivationFlops * d.H + 2 * d.H * d.c;
  return make(SublayerKind::Head, num_layers, "head", params, flops, 2, d.c * d.e,
              d.s * d.H + d.H + d.c, d.e);
}

}  // namespace

std::string to_string(SublayerKind kind) {
  switch (kind) {
    case SublayerKind::Stem: return "stem";
    case SublayerKind::Attention: return "attention";
    case SublayerKind::Mlp: return "mlp";
    case SublayerKind::Head: return "head";
  }
  return "?";
}

std::ostream& operator<<(std::ostream& os, SublayerKind kind) { return os << to_string(kind); }

std::ostream& operator<<(std::ostream& os, const Sublayer& s) {
  return os << s.name << " (" << s.kind << ", layer " << s.layer << "): params " << s.params
            << ", fwd " << s.fwd_flops_per_sample << " FLOP, bwd " << s.bwd_flops_per_sample
            << " FLOP, out " << s.out_activation_bytes_per_sample << " B, saved "
            << s.saved_activation_bytes_per_sample << " B per sample";
}

std::ostream& operator<<(std::ostream& os, SublayerRange r) {
  return os << "[" << r.first << ", " << r.last << ")";
}

double ModelSpec::total_params() const { return params({0, num_sublayers()}); }

double ModelSpec::params(SublayerRange r) const {
  double sum = 0;
  for (int i = r.first; i < r.last; ++i) sum += sublayers[i].params;
  return sum;
}

double ModelSpec::input_bytes_per_sample_of(int index) const {
  assert(index >= 0 && index < num_sublayers());
  return index == 0 ? input_bytes_per_sample : sublayers[index - 1].out_activation_bytes_per_sample;
}

double activation_element_bytes(Precision p) { return p == Precision::BF16 ? 2 : 4; }

ModelSpec build_model_spec(const ModelConfig& m, Precision precision) {
  const Dims d{static_cast<double>(m.tokens()),          static_cast<double>(m.hidden_size),
               static_cast<double>(m.intermediate_size), static_cast<double>(m.num_attention_heads),
               static_cast<double>(m.num_labels),        activation_element_bytes(precision)};
  const int L = m.num_hidden_layers;
  const bool vit = m.family == ModelFamily::ViT;

  ModelSpec spec{m, precision, 0, {}};
  spec.input_bytes_per_sample =
      vit ? kPixelBytes * m.num_channels * static_cast<double>(m.image_size) * m.image_size
          : kTokenIdBytes * kBertInputsPerToken * d.s;
  spec.sublayers.reserve(2 * L + 2);
  spec.sublayers.push_back(vit ? vit_stem(m, d) : bert_stem(m, d));
  for (int i = 0; i < L; ++i) {
    spec.sublayers.push_back(attention(d, i));
    spec.sublayers.push_back(mlp(d, i));
  }
  spec.sublayers.push_back(vit ? vit_head(d, L) : bert_head(d, L));
  return spec;
}

}  // namespace ep
