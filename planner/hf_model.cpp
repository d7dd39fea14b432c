#include "planner/hf_model.hpp"

#include <nlohmann/json.hpp>

#include <climits>
#include <filesystem>

#include "planner/error.hpp"
#include "planner/input_file.hpp"
#include "planner/json_input.hpp"

namespace ep {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr const char* kBertModel = "BertModel";
constexpr const char* kBertClassifier = "BertForSequenceClassification";
constexpr const char* kVitModel = "ViTModel";
constexpr const char* kVitClassifier = "ViTForImageClassification";

// A config.json is a few kB; id2label of a large label set a few MB.
constexpr InputFormat kHfConfigFile{"config.json", 64 << 20, "a model's config.json is a few kB"};

std::string shown(const json& v) { return printable(v.dump(), 60); }

// Reads config.json's keys with Hugging Face's defaults for absent ones
// (what transformers does), and refuses a value of the wrong type or range.
class Keys {
 public:
  Keys(std::string path, const json& root) : path_(std::move(path)), root_(root) {}

  [[noreturn]] void fail(const std::string& key, const std::string& expected, const std::string& found) const {
    throw Error(path_ + ": key '" + key + "': expected " + expected + ", found " + found);
  }
  [[nodiscard]] const json* get(const std::string& key) const {
    const auto it = root_.find(key);
    return it == root_.end() || it->is_null() ? nullptr : &*it;
  }
  int integer(const std::string& key, int fallback, std::int64_t lo, std::int64_t hi) const {
    const json* v = get(key);
    if (!v) return fallback;
    if (!v->is_number_integer()) fail(key, "an integer", shown(*v));
    const auto n = v->get<std::int64_t>();
    if (n < lo || n > hi) fail(key, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", shown(*v));
    return static_cast<int>(n);
  }
  double number(const std::string& key, double fallback) const {
    const json* v = get(key);
    if (!v) return fallback;
    if (!v->is_number()) fail(key, "a number", shown(*v));
    return v->get<double>();
  }
  double probability(const std::string& key, double fallback) const {
    const json* v = get(key);
    if (!v) return fallback;
    if (!v->is_number() || !(v->get<double>() >= 0 && v->get<double>() < 1))
      fail(key, "a probability in [0, 1)", shown(*v));
    return v->get<double>();
  }
  std::string string(const std::string& key, const std::string& fallback) const {
    const json* v = get(key);
    if (!v) return fallback;
    if (!v->is_string()) fail(key, "a string", shown(*v));
    return v->get<std::string>();
  }
  bool boolean(const std::string& key, bool fallback) const {
    const json* v = get(key);
    if (!v) return fallback;
    if (!v->is_boolean()) fail(key, "true or false", shown(*v));
    return v->get<bool>();
  }

 private:
  std::string path_;
  const json& root_;
};

Activation read_activation(const Keys& k) {
  const std::string act = k.string("hidden_act", "gelu");
  if (act == "gelu") return Activation::Gelu;
  if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast") return Activation::GeluTanh;
  k.fail("hidden_act", "gelu (erf) or a tanh GELU (gelu_new, gelu_pytorch_tanh, gelu_fast)", "\"" + printable(act) + "\"");
}

std::vector<std::string> read_labels(const Keys& k) {
  std::vector<std::string> labels;
  const json* map = k.get("id2label");
  if (!map) {
    const int n = k.integer("num_labels", 2, 1, 1 << 24);
    for (int i = 0; i < n; ++i) labels.push_back("LABEL_" + std::to_string(i));
    return labels;
  }
  if (!map->is_object() || map->empty() || map->size() > (1u << 24))
    k.fail("id2label", "an object {\"0\": name, ...} of 1 to 2^24 labels", shown(*map));
  labels.resize(map->size());
  std::vector<bool> seen(map->size());
  for (const auto& [id, name] : map->items()) {
    std::size_t i = 0;
    if (id.empty() || id.size() > 9 || id.find_first_not_of("0123456789") != std::string::npos ||
        (i = std::stoul(id)) >= labels.size() || seen[i])
      k.fail("id2label", "ids 0 to " + std::to_string(labels.size() - 1) + ", each once", "id \"" + printable(id) + "\"");
    if (!name.is_string()) k.fail("id2label", "label names (strings)", shown(name));
    seen[i] = true;
    labels[i] = name.get<std::string>();
  }
  return labels;
}

void read_bert(const Keys& k, ModelConfig& m) {
  m.vocab_size = k.integer("vocab_size", 30522, 1, 1 << 24);
  m.max_position_embeddings = k.integer("max_position_embeddings", 512, 1, 1 << 20);
  m.type_vocab_size = k.integer("type_vocab_size", 2, 1, 1024);
  const std::string positions = k.string("position_embedding_type", "absolute");
  if (positions != "absolute")
    k.fail("position_embedding_type", "\"absolute\" (ElasticPipe's BERT adds learned positions)",
           "\"" + printable(positions) + "\"");
  if (k.boolean("is_decoder", false)) k.fail("is_decoder", "false (an encoder)", "true");
  if (k.boolean("add_cross_attention", false)) k.fail("add_cross_attention", "false (an encoder)", "true");
}

void read_vit(const Keys& k, ModelConfig& m) {
  m.image_size = k.integer("image_size", 224, 1, 1 << 16);
  m.patch_size = k.integer("patch_size", 16, 1, 1 << 16);
  m.num_channels = k.integer("num_channels", 3, 1, 1024);
  if (m.image_size % m.patch_size != 0)
    k.fail("image_size", "a multiple of patch_size = " + std::to_string(m.patch_size), std::to_string(m.image_size));
  if (!k.boolean("qkv_bias", true)) k.fail("qkv_bias", "true (ElasticPipe's attention has biases)", "false");
}

void add(HfLayout& l, const std::string& ours, std::vector<HfSource> sources) {
  l.params.push_back({ours, std::move(sources)});
}

// weight and bias of `ours` from `theirs`.
void linear(HfLayout& l, const std::string& ours, const std::string& theirs) {
  for (const char* p : {"weight", "bias"}) add(l, ours + "." + p, {{l.prefix + theirs + "." + p, 0}});
}

}  // namespace

std::string hf_config_path(const std::string& dir) { return (std::filesystem::path(dir) / "config.json").string(); }
std::string hf_weights_path(const std::string& dir) {
  return (std::filesystem::path(dir) / "model.safetensors").string();
}

HfConfig parse_hf_config(const std::string& path, const std::string& text) {
  const json root = parse_json(text, path);
  if (!root.is_object()) throw Error(path + ": expected a JSON object, found " + shown(root));
  const Keys k(path, root);
  HfConfig c;
  c.path = path;
  c.text = text;
  const std::string type = k.string("model_type", "");
  if (type != "bert" && type != "vit")
    k.fail("model_type", "\"bert\" or \"vit\" (BERT and ViT checkpoints)", type.empty() ? "none" : "\"" + printable(type) + "\"");
  const bool vit = type == "vit";
  const json* archs = k.get("architectures");
  if (!archs || !archs->is_array() || archs->size() != 1 || !(*archs)[0].is_string())
    k.fail("architectures", "one architecture name", archs ? shown(*archs) : "none");
  c.architecture = (*archs)[0].get<std::string>();
  const std::string base = vit ? kVitModel : kBertModel, classifier = vit ? kVitClassifier : kBertClassifier;
  if (c.architecture != base && c.architecture != classifier)
    k.fail("architectures", base + " or " + classifier, "\"" + printable(c.architecture) + "\"");
  c.classifier = c.architecture == classifier;

  ModelConfig& m = c.model;
  m.family = vit ? ModelFamily::ViT : ModelFamily::Bert;
  m.hidden_size = k.integer("hidden_size", 768, 1, 1 << 17);
  m.num_hidden_layers = k.integer("num_hidden_layers", 12, 1, 1024);
  m.num_attention_heads = k.integer("num_attention_heads", 12, 1, 4096);
  m.intermediate_size = k.integer("intermediate_size", 3072, 1, 1 << 19);
  if (m.hidden_size % m.num_attention_heads != 0)
    k.fail("num_attention_heads", "a divisor of hidden_size = " + std::to_string(m.hidden_size),
           std::to_string(m.num_attention_heads));
  if (k.get("head_dim") && k.integer("head_dim", 0, 1, 1 << 17) != m.hidden_size / m.num_attention_heads)
    k.fail("head_dim", "hidden_size / num_attention_heads = " + std::to_string(m.hidden_size / m.num_attention_heads),
           shown(*k.get("head_dim")));
  m.hidden_act = read_activation(k);
  m.layer_norm_eps = k.number("layer_norm_eps", 1e-12);
  if (!(m.layer_norm_eps > 0 && m.layer_norm_eps < 1)) k.fail("layer_norm_eps", "a number in (0, 1)", shown(*k.get("layer_norm_eps")));
  c.hidden_dropout = k.probability("hidden_dropout_prob", vit ? 0.0 : 0.1);
  c.attention_dropout = k.probability("attention_probs_dropout_prob", vit ? 0.0 : 0.1);
  // BertForSequenceClassification: classifier_dropout, or the hidden rate
  // where it is null; ViTForImageClassification has none.
  c.classifier_dropout = vit ? 0.0 : k.probability("classifier_dropout", c.hidden_dropout);
  if (vit) read_vit(k, m);
  else read_bert(k, m);
  if (c.classifier) {
    const std::string problem = k.string("problem_type", "single_label_classification");
    if (problem != "single_label_classification")
      k.fail("problem_type", "single_label_classification (one label per sample, cross-entropy)",
             "\"" + printable(problem) + "\"");
    c.labels = read_labels(k);
    m.num_labels = static_cast<int>(c.labels.size());
  }
  return c;
}

HfConfig read_hf_config(const std::string& dir) {
  const std::string path = hf_config_path(dir);
  return parse_hf_config(path, read_input_file(path, kHfConfigFile));
}

std::string hf_classifier_architecture(ModelFamily f) {
  return f == ModelFamily::ViT ? kVitClassifier : kBertClassifier;
}

HfLayout hf_layout(const ModelConfig& m, const std::string& architecture) {
  const bool vit = m.family == ModelFamily::ViT;
  const bool classifier = architecture == hf_classifier_architecture(m.family);
  HfLayout l;
  l.prefix = classifier ? (vit ? "vit." : "bert.") : "";
  const std::string& p = l.prefix;
  const std::int64_t H = m.hidden_size;
  if (vit) {
    linear(l, "stem.patch", "embeddings.patch_embeddings.projection");
    add(l, "stem.cls_token", {{p + "embeddings.cls_token", 0}});
    add(l, "stem.position", {{p + "embeddings.position_embeddings", 0}});
  } else {
    add(l, "stem.word.weight", {{p + "embeddings.word_embeddings.weight", 0}});
    add(l, "stem.position.weight", {{p + "embeddings.position_embeddings.weight", 0}});
    add(l, "stem.token_type.weight", {{p + "embeddings.token_type_embeddings.weight", 0}});
    linear(l, "stem.ln", "embeddings.LayerNorm");
    l.unused.push_back(p + "embeddings.position_ids");
  }
  for (int i = 0; i < m.num_hidden_layers; ++i) {
    const std::string layer = "encoder.layer." + std::to_string(i) + ".";
    const std::string att = "att." + std::to_string(i), mlp = "mlp." + std::to_string(i);
    const std::string self = layer + (vit ? "attention.attention." : "attention.self.");
    for (const char* part : {"weight", "bias"}) {
      std::vector<HfSource> qkv;
      for (const char* proj : {"query", "key", "value"}) qkv.push_back({p + self + proj + "." + part, H});
      add(l, att + ".qkv." + part, std::move(qkv));
    }
    linear(l, att + ".out", layer + "attention.output.dense");
    linear(l, att + ".ln", layer + (vit ? "layernorm_before" : "attention.output.LayerNorm"));
    linear(l, mlp + ".fc1", layer + "intermediate.dense");
    linear(l, mlp + ".fc2", layer + "output.dense");
    linear(l, mlp + ".ln", layer + (vit ? "layernorm_after" : "output.LayerNorm"));
  }
  if (vit) linear(l, "head.ln", "layernorm");
  else linear(l, "head.pooler", "pooler.dense");
  if (vit && !classifier)
    for (const char* part : {"weight", "bias"}) l.unused.push_back(std::string("pooler.dense.") + part);
  for (const char* part : {"weight", "bias"})
    l.params.push_back({std::string("head.classifier.") + part,
                        classifier ? std::vector<HfSource>{{std::string("classifier.") + part, 0}}
                                   : std::vector<HfSource>{}});
  return l;
}

std::string hf_config_json(const ModelConfig& m, const std::string& source, const std::vector<std::string>& labels) {
  ordered_json c = source.empty() ? ordered_json::object() : parse_json<ordered_json>(source, "config.json");
  const bool vit = m.family == ModelFamily::ViT;
  c["architectures"] = {hf_classifier_architecture(m.family)};
  c["model_type"] = vit ? "vit" : "bert";
  c["hidden_size"] = m.hidden_size;
  c["num_hidden_layers"] = m.num_hidden_layers;
  c["num_attention_heads"] = m.num_attention_heads;
  c["intermediate_size"] = m.intermediate_size;
  // The source's name for the same function stays (gelu_new and
  // gelu_pytorch_tanh are one function, computed two ways).
  const std::string act = c.contains("hidden_act") && c["hidden_act"].is_string() ? c["hidden_act"].get<std::string>() : "";
  const bool tanh = m.hidden_act == Activation::GeluTanh;
  if (act.empty() || (act == "gelu") == tanh) c["hidden_act"] = tanh ? "gelu_pytorch_tanh" : "gelu";
  c["layer_norm_eps"] = m.layer_norm_eps;
  if (source.empty()) {  // ElasticPipe trains without dropout
    c["hidden_dropout_prob"] = 0.0;
    c["attention_probs_dropout_prob"] = 0.0;
  }
  if (vit) {
    c["image_size"] = m.image_size;
    c["patch_size"] = m.patch_size;
    c["num_channels"] = m.num_channels;
    c["qkv_bias"] = true;
  } else {
    c["vocab_size"] = m.vocab_size;
    c["max_position_embeddings"] = m.max_position_embeddings;
    c["type_vocab_size"] = m.type_vocab_size;
    c["position_embedding_type"] = "absolute";
  }
  ordered_json id2label = ordered_json::object(), label2id = ordered_json::object();
  for (int i = 0; i < m.num_labels; ++i) {
    const std::string name = i < static_cast<int>(labels.size()) ? labels[i] : "LABEL_" + std::to_string(i);
    id2label[std::to_string(i)] = name;
    label2id[name] = i;
  }
  c["id2label"] = id2label;
  c["label2id"] = label2id;
  c.erase("num_labels");
  c.erase("problem_type");
  return c.dump(2) + "\n";
}

}  // namespace ep
