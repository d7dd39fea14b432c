// Hugging Face checkpoints as the executor's weights: model.safetensors
// read onto the sublayers by name (planner/hf_model.hpp has the map), and
// the model written back as ...ForSequenceClassification /
// ...ForImageClassification, so that transformers opens it without
// conversion. The header is checked whole (planner/safetensors.hpp), and
// every tensor the map expects (its dtype, its shape) before any value is
// copied; a missing, extra or misshapen tensor is an ep::Error naming the
// file and the tensor.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace ep::exec {

class Model;
struct Dropout;

struct HfLoaded {
  std::string architecture;
  std::vector<std::string> seeded;  // parameters left at their seeded values (a new classifier, init_keep)
  std::vector<std::string> unused;  // tensors of the checkpoint the model does not use
};

// Loads DIR's model.safetensors (its config.json says the architecture)
// into `model`, whose config must be the checkpoint's (planner/config.cpp
// made it so). `keep`: parameter name prefixes that keep their seeded values
// (training.init_keep), their tensors skipped whatever their shape.
// Floating tensors (F32, F16, BF16, F64) are converted to float32.
HfLoaded load_hf_weights(Model& model, const std::string& dir, const std::vector<std::string>& keep = {});

// The model's weights as model.safetensors of its classification
// architecture (float32, the fused QKV split into query, key and value).
// `path` names the file in errors.
void write_hf_weights(const Model& model, std::ostream& out, const std::string& path);

// The dropout DIR's config.json sets: hidden_dropout_prob,
// attention_probs_dropout_prob, and (BERT) classifier_dropout or, where it
// is null or absent, hidden_dropout_prob, as transformers' classifier
// takes it. Each must be in [0, 1) (an ep::Error naming the file and key).
// An empty DIR: none.
[[nodiscard]] Dropout checkpoint_dropout(const std::string& dir);

}  // namespace ep::exec
