// Hugging Face checkpoints of BERT (BertModel, BertForSequenceClassification)
// and ViT (ViTModel, ViTForImageClassification), without torch: config.json
// read into a model section (and written from one), and the map from the
// checkpoint's tensor names onto the executor's sublayer parameters. The
// tensors themselves are exec/hf_weights' work. Every refusal is an
// ep::Error naming config.json, the key, what was expected and found.
#pragma once

#include <string>
#include <vector>

#include "planner/config.hpp"

namespace ep {

// What config.json says beyond the model section's sizes.
struct HfConfig {
  std::string path;          // DIR/config.json
  std::string architecture;  // "BertModel", "ViTForImageClassification", ...
  bool classifier = false;   // a ...ForSequenceClassification / ...ForImageClassification
  ModelConfig model;         // sizes, activation, epsilon; num_labels: the classifier's (0 without one); seq_length 0
  std::vector<std::string> labels;  // id2label in id order (classifier only)
  // hidden_dropout_prob, attention_probs_dropout_prob, and the classifier's
  // as transformers applies them; each in [0, 1).
  double hidden_dropout = 0, attention_dropout = 0, classifier_dropout = 0;
  std::string text;          // the file as read
};

// The checkpoint folder's files.
[[nodiscard]] std::string hf_config_path(const std::string& dir);
[[nodiscard]] std::string hf_weights_path(const std::string& dir);

// Reads DIR/config.json. Refused: another model_type or architecture, a
// hidden_act other than gelu (erf) or a tanh GELU (gelu_new,
// gelu_pytorch_tanh, gelu_fast), BERT with relative positions or as a
// decoder, ViT without QKV biases, a classifier for regression or several
// labels, sizes outside the config's ranges.
[[nodiscard]] HfConfig read_hf_config(const std::string& dir);
[[nodiscard]] HfConfig parse_hf_config(const std::string& path, const std::string& text);

// One executor parameter as the checkpoint holds it: the tensors (in the
// Hugging Face names) concatenated along dimension 0, each `rows` long
// (three for the fused QKV projection, one for the rest).
struct HfSource {
  std::string name;
  std::int64_t rows = 0;  // 0: the whole parameter
};
struct HfParam {
  std::string ours;  // "att.3.qkv.weight"
  std::vector<HfSource> sources;
};
struct HfLayout {
  std::string prefix;  // "bert." / "vit." for a classifier, "" for a base model
  std::vector<HfParam> params;  // every executor parameter, in the executor's order
  // Tensors the architecture has that the executor's model does not use:
  // BERT's position_ids buffer, a ViTModel's pooler (image classification
  // reads the class token after the final LayerNorm, without it).
  std::vector<std::string> unused;
};

// The layout of `m` as `architecture` ("BertForSequenceClassification", ...)
// names it. A base model has no classifier: head.classifier is absent from
// its params' sources (its sources list is empty).
[[nodiscard]] HfLayout hf_layout(const ModelConfig& m, const std::string& architecture);

// The classification architecture of a family, which `train` writes.
[[nodiscard]] std::string hf_classifier_architecture(ModelFamily);

// config.json for `m` as that architecture: `source` (a checkpoint's
// config.json text, or "") with the sizes, activation, epsilon,
// architecture and labels set from `m` and `labels` (LABEL_i where empty).
[[nodiscard]] std::string hf_config_json(const ModelConfig& m, const std::string& source,
                                         const std::vector<std::string>& labels);

}  // namespace ep
