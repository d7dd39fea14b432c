// The models at sublayer granularity, exactly the planner's list
// (model_spec.hpp): stem, att.0, mlp.0, …, att.{L-1}, mlp.{L-1}, head. Each
// sublayer owns its parameters by name and is a pure function of its input,
// so a stage is just a run of sublayers and a partition boundary can fall
// after any of them. Written on ATen ops, not torch::nn: parameter names,
// initialisation and placement stay ours, and the file compiles on narrow
// headers.
//   ViT (pre-LN): stem = patch conv + class token + position embedding;
//     att = x + Attn(LN(x)); mlp = x + FC2(GELU(FC1(LN(x))));
//     head = Linear(LN(x)[:, 0]).
//   BERT (post-LN): stem = LN(word + position + type embedding);
//     att = LN(x + Attn(x)); mlp = LN(x + FC2(GELU(FC1(x))));
//     head = Linear(tanh(Linear(x[:, 0]))) (pooler + classifier).
// BERT's attention skips each sample's padding when its micro-batch says
// how many of its tokens are real (`lengths`, right padding, as a Hugging
// Face tokenizer pads). The GELU (exact or tanh) and the LayerNorm epsilon
// are the config's (a checkpoint's).
// Dropout (a checkpoint's rates, where Hugging Face's BERT and ViT put it)
// applies only where a forward is given per-sample keys: a sample's mask
// is a hash of its key, the site and the element's place in the sample, so
// it is the same whichever micro-batch, stage, device or recomputation
// runs it. A pipelined run still equals a single-device one, a resumed run
// needs no RNG state, and without keys (evaluation, frozen layers, whose
// cached outputs must equal recomputed ones) there is none.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "planner/model_spec.hpp"

namespace ep::exec {

struct NamedTensor {
  std::string name;  // "att.3.qkv.weight"
  at::Tensor tensor;
};

class Sublayer {
 public:
  explicit Sublayer(std::string name) : name_(std::move(name)) {}
  virtual ~Sublayer() = default;
  Sublayer(const Sublayer&) = delete;
  Sublayer& operator=(const Sublayer&) = delete;

  [[nodiscard]] const std::string& name() const { return name_; }
  // ViT stem: float [B, C, H, W]; BERT stem: int64 token ids [B, S];
  // att/mlp: [B, S, H]; head: [B, S, H] -> logits [B, classes].
  // `lengths`: int64 [B] on x's device, the real tokens of each sample
  // (the rest is padding attention ignores); undefined: none padded.
  // `keys`: int64 [B] on x's device, each sample's dropout key
  // (dropout_keys); undefined: no dropout.
  [[nodiscard]] virtual at::Tensor forward(const at::Tensor& x, const at::Tensor& lengths,
                                           const at::Tensor& keys) const = 0;
  [[nodiscard]] at::Tensor forward(const at::Tensor& x, const at::Tensor& lengths = {}) const {
    return forward(x, lengths, {});
  }
  [[nodiscard]] std::vector<NamedTensor>& params() { return params_; }
  [[nodiscard]] const std::vector<NamedTensor>& params() const { return params_; }
  [[nodiscard]] std::int64_t num_params() const;
  // Moves the parameters (keeping their names and values) to `device`.
  void to(const at::Device& device);
  void set_requires_grad(bool trainable);

 protected:
  enum class Init { Normal, Zeros, Ones };  // Normal: N(0, 0.02), as BERT and ViT
  // Registers parameter "<sublayer name>.<local_name>", initialised from
  // its own stream of `seed`.
  at::Tensor add(const std::string& local_name, std::vector<std::int64_t> shape, Init init,
                 std::uint64_t seed);

 private:
  std::string name_;
  std::vector<NamedTensor> params_;
};

// Dropout probabilities, as Hugging Face's configs name them: hidden
// (hidden_dropout_prob: after the embeddings and each attention and MLP
// output), attention (attention_probs_dropout_prob: the attention
// weights) and classifier (BERT's, before its classifier). 0: none.
struct Dropout {
  double hidden = 0, attention = 0, classifier = 0;
  [[nodiscard]] bool any() const { return hidden > 0 || attention > 0 || classifier > 0; }
};

// The seed of epoch `epoch`'s dropout keys in a run of training.seed `seed`.
[[nodiscard]] std::uint64_t dropout_seed(std::uint64_t seed, int epoch);

// Per-sample dropout keys: int64 [n] on the host, sample i's from (seed,
// indices[i]); a masked slot (-1) gets one too (its loss weight is 0).
// The trainer's seed changes each epoch, so a sample's masks do.
[[nodiscard]] at::Tensor dropout_keys(std::uint64_t seed, const std::vector<std::int64_t>& indices,
                                      bool pinned = false);

// Inverted dropout of x (batch first) with probability p: sample b's mask
// a hash of (keys[b], the site's `salt`) and each element's place within
// the sample, its kept elements scaled by 1 / (1 - p); x itself where keys
// is undefined or p is 0.
[[nodiscard]] at::Tensor dropout(const at::Tensor& x, const at::Tensor& keys, std::int64_t salt, double p);

class Model {
 public:
  // Sizes from the config; weights from the seed only: each parameter is
  // drawn from its own splitmix64 stream keyed by (seed, name), so it does
  // not depend on the order of construction or on the device.
  Model(const ModelConfig& config, std::uint64_t seed, const Dropout& dropout = {});

  [[nodiscard]] const ModelSpec& spec() const { return spec_; }
  [[nodiscard]] const Dropout& dropout() const { return dropout_; }
  [[nodiscard]] int num_sublayers() const { return static_cast<int>(sublayers_.size()); }
  [[nodiscard]] Sublayer& sublayer(int i) { return *sublayers_.at(i); }
  [[nodiscard]] const Sublayer& sublayer(int i) const { return *sublayers_.at(i); }
  // Sublayers [range.first, range.last) applied in order; `lengths` and
  // `keys` as Sublayer::forward's.
  [[nodiscard]] at::Tensor forward(SublayerRange range, at::Tensor x, const at::Tensor& lengths = {},
                                   const at::Tensor& keys = {}) const;
  [[nodiscard]] std::vector<NamedTensor> named_params() const;

  // Binary weights file keyed by parameter name (layout in model.cpp). load
  // requires exactly this model's names and shapes and throws ep::Error
  // naming the file and the first mismatch; values land on each
  // parameter's current device.
  //
  // `keep`: name prefixes of parameters that keep their seeded values (a
  // fine-tuning's new classifier): the file's entries for them are skipped
  // whatever their shape, and it need not hold them. Each prefix must match
  // a parameter of this model.
  // The file closes with a CRC-32, checked (with every record) before any
  // parameter changes; load returns false for a file of the version before,
  // which had none to check.
  void save(const std::string& path) const;
  bool load(const std::string& path, const std::vector<std::string>& keep = {});
  // Throws ep::Error naming the first prefix that starts no parameter name
  // (and the names' first parts).
  void check_keep(const std::vector<std::string>& keep) const;

 private:
  ModelSpec spec_;
  Dropout dropout_;
  std::vector<std::unique_ptr<Sublayer>> sublayers_;
};

// Loss of a micro-batch with per-sample weights (0 for masked sampler
// slots): Σ weight · cross-entropy / denominator, with the denominator the
// real samples of the whole batch, so summing micro-batches gives the
// batch mean.
[[nodiscard]] at::Tensor weighted_cross_entropy(const at::Tensor& logits, const at::Tensor& labels,
                                                const at::Tensor& weights, double denominator);

}  // namespace ep::exec
