// Hugging Face checkpoints without torch: the safetensors header reader
// against truncated and lying headers, config.json read into a model
// section and written from one, the name map, and model.checkpoint in a
// config.
#include <catch2/catch.hpp>

#include <fstream>
#include <iterator>

#include "planner/hf_model.hpp"
#include "planner/safetensors.hpp"
#include "tests/planner/support.hpp"

using ep::test::error_of;

namespace {

// Two F32 tensors, "a" [2, 3] and "b" [4], back to back: the header and
// their 40 bytes of data.
std::string two_tensors() {
  const std::vector<ep::SafetensorsEntry> e{{"a", "F32", {2, 3}, 0, 24}, {"b", "F32", {4}, 24, 40}};
  return ep::safetensors_header_bytes(e, {{"format", "pt"}}) + std::string(40, '\0');
}

// A file of `json` as its header and `data` bytes after it.
std::string file_of(const std::string& json, std::size_t data) {
  std::string out(8, '\0');
  std::uint64_t n = json.size();
  for (int i = 0; i < 8; ++i, n >>= 8) out[i] = static_cast<char>(n & 0xff);
  return out + json + std::string(data, '\0');
}

std::string parse_error(const std::string& file) {
  return error_of([&] { (void)ep::parse_safetensors_header("m.safetensors", file, file.size()); });
}

constexpr const char* kBert = R"({"architectures": ["BertForSequenceClassification"], "model_type": "bert",
  "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 48,
  "vocab_size": 64, "max_position_embeddings": 24, "type_vocab_size": 2, "hidden_act": "gelu",
  "layer_norm_eps": 1e-12, "id2label": {"0": "neg", "1": "pos"}, "hidden_dropout_prob": 0.1})";

std::string bert_with(const std::string& from, const std::string& to) {
  std::string s = kBert;
  s.replace(s.find(from), from.size(), to);
  return s;
}

}  // namespace

TEST_CASE("safetensors: a header written is read back, offsets from the data's start") {
  const std::string file = two_tensors();
  const ep::SafetensorsHeader h = ep::parse_safetensors_header("m.safetensors", file, file.size());
  REQUIRE(h.tensors.size() == 2);
  CHECK(h.data_start % 8 == 0);
  CHECK(h.data_start + 40 == file.size());
  CHECK(h.find("a")->shape == std::vector<std::int64_t>{2, 3});
  CHECK(h.find("b")->begin == 24);
  CHECK(h.metadata.at("format") == "pt");
  CHECK(h.find("c") == nullptr);
}

TEST_CASE("safetensors: truncated and lying headers are refused naming the file and the tensor") {
  const std::string good = two_tensors();
  CHECK(parse_error(good.substr(0, 5)).find("m.safetensors: expected a safetensors file") == 0);
  CHECK(parse_error(good.substr(0, 20)).find("header length: expected 2 to 12 bytes") != std::string::npos);
  // The data cut short: the offsets point past the end.
  CHECK(parse_error(good.substr(0, good.size() - 4)).find("tensor 'b': expected data_offsets within") !=
        std::string::npos);
  std::string huge = good;
  huge.replace(0, 8, std::string(8, '\xff'));
  CHECK(parse_error(huge).find("header length: expected") != std::string::npos);
  const auto bad = [](const std::string& json, std::size_t data = 40) { return parse_error(file_of(json, data)); };
  CHECK(bad(R"({"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}})", 20) ==
        "m.safetensors: tensor 'a': expected 24 bytes (F32 of shape [2,3]), found 20 (data_offsets [0,20])");
  CHECK(bad(R"({"a": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 4]}})", 4).find("expected dtype BOOL|U8") !=
        std::string::npos);
  CHECK(bad(R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4).find("integers >= 0") !=
        std::string::npos);
  CHECK(bad(R"({"a": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 4]}})", 4)
            .find("expected a shape of at most 2^62 bytes") != std::string::npos);
  // Two tensors on the same bytes, a hole before one, bytes after the last.
  CHECK(bad(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                "b": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 4)
            .find("tensor 'b': expected data starting at byte 4") != std::string::npos);
  CHECK(bad(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8)
            .find("tensor 'a': expected data starting at byte 0") != std::string::npos);
  CHECK(bad(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 12) ==
        "m.safetensors: expected 4 bytes of data after the header (the tensors' data), found 12");
  CHECK(bad(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8) ==
        "m.safetensors: tensor 'a': expected one entry, found two");
  CHECK(bad(R"([1, 2])", 0).find("expected a JSON object starting with '{'") != std::string::npos);
  CHECK(bad(R"({"a": )", 0).find("not valid JSON") != std::string::npos);
  CHECK(bad(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "x": 1}})", 4)
            .find("only the keys dtype, shape and data_offsets") != std::string::npos);
  CHECK(bad(R"({"__metadata__": {"k": 1}})", 0).find("__metadata__ 'k': expected a string") != std::string::npos);
}

TEST_CASE("safetensors: a file on disk is read through its bounded header") {
  const ep::test::TempDir dir("safetensors");
  const std::string path = dir.write("m.safetensors", two_tensors());
  CHECK(ep::read_safetensors_header(path).tensors.size() == 2);
  CHECK(error_of([&] { (void)ep::read_safetensors_header(dir.write("short.safetensors", "abc")); })
            .find("short.safetensors: expected a safetensors file") != std::string::npos);
  CHECK(error_of([&] { (void)ep::read_safetensors_header(dir.path()); }).find("a directory") != std::string::npos);
}

TEST_CASE("config.json: a BERT classifier gives the model section and its labels") {
  const ep::HfConfig c = ep::parse_hf_config("ck/config.json", kBert);
  CHECK(c.classifier);
  CHECK(c.model.family == ep::ModelFamily::Bert);
  CHECK(c.model.hidden_size == 32);
  CHECK(c.model.num_labels == 2);
  CHECK(c.labels == std::vector<std::string>{"neg", "pos"});
  CHECK(c.hidden_dropout == 0.1);
  CHECK(c.attention_dropout == 0.1);  // Hugging Face's default for BERT
  CHECK(c.classifier_dropout == 0.1);  // none given: the hidden rate
  CHECK(ep::parse_hf_config("c", bert_with("\"gelu\"", "\"gelu_new\"")).model.hidden_act == ep::Activation::GeluTanh);
}

TEST_CASE("config.json: another family or architecture is refused with the reason") {
  const auto refused = [](const std::string& text) { return error_of([&] { (void)ep::parse_hf_config("c.json", text); }); };
  CHECK(refused(bert_with("\"model_type\": \"bert\"", "\"model_type\": \"roberta\"")) ==
        "c.json: key 'model_type': expected \"bert\" or \"vit\" (BERT and ViT checkpoints), found \"roberta\"");
  CHECK(refused(bert_with("BertForSequenceClassification", "BertForMaskedLM")) ==
        "c.json: key 'architectures': expected BertModel or BertForSequenceClassification, found \"BertForMaskedLM\"");
  CHECK(refused(bert_with("\"gelu\"", "\"relu\"")).find("key 'hidden_act'") != std::string::npos);
  CHECK(refused(bert_with("\"model_type\": \"bert\"", "\"model_type\": \"bert\", \"position_embedding_type\": "
                                                      "\"relative_key\""))
            .find("key 'position_embedding_type'") != std::string::npos);
  CHECK(refused(bert_with("\"model_type\": \"bert\"", "\"model_type\": \"bert\", \"problem_type\": \"regression\""))
            .find("key 'problem_type'") != std::string::npos);
  CHECK(refused(bert_with("\"hidden_size\": 32", "\"hidden_size\": 30")).find("key 'num_attention_heads'") !=
        std::string::npos);
  CHECK(refused(bert_with("\"0\": \"neg\"", "\"2\": \"neg\"")).find("key 'id2label'") != std::string::npos);
  CHECK(refused(R"({"model_type": "vit", "architectures": ["ViTModel"], "qkv_bias": false})").find("key 'qkv_bias'") !=
        std::string::npos);
  CHECK(refused("[]").find("expected a JSON object") != std::string::npos);
}

TEST_CASE("the name map: fused QKV from three tensors, prefixes by architecture, a base model's new head") {
  ep::ModelConfig m = ep::parse_hf_config("c", kBert).model;
  const ep::HfLayout cls = ep::hf_layout(m, "BertForSequenceClassification");
  CHECK(cls.prefix == "bert.");
  CHECK(cls.params.size() == 5 + 2 * 12 + 4);  // stem, two layers of two sublayers, pooler and classifier
  const auto find = [](const ep::HfLayout& l, const std::string& ours) {
    for (const auto& p : l.params)
      if (p.ours == ours) return p;
    FAIL("no parameter " << ours);
    return ep::HfParam{};
  };
  const ep::HfParam qkv = find(cls, "att.1.qkv.weight");
  REQUIRE(qkv.sources.size() == 3);
  CHECK(qkv.sources[1].name == "bert.encoder.layer.1.attention.self.key.weight");
  CHECK(qkv.sources[1].rows == 32);
  CHECK(find(cls, "head.classifier.bias").sources[0].name == "classifier.bias");
  const ep::HfLayout base = ep::hf_layout(m, "BertModel");
  CHECK(base.prefix.empty());
  CHECK(find(base, "head.classifier.weight").sources.empty());
  CHECK(find(base, "mlp.0.ln.weight").sources[0].name == "encoder.layer.0.output.LayerNorm.weight");
  m.family = ep::ModelFamily::ViT;
  const ep::HfLayout vit = ep::hf_layout(m, "ViTModel");
  CHECK(find(vit, "att.0.ln.bias").sources[0].name == "encoder.layer.0.layernorm_before.bias");
  CHECK(vit.unused == std::vector<std::string>{"pooler.dense.weight", "pooler.dense.bias"});
}

TEST_CASE("config.json written from a model reads back as that model, the source's names kept") {
  ep::ModelConfig m = ep::parse_hf_config("c", bert_with("\"gelu\"", "\"gelu_new\"")).model;
  m.num_labels = 3;
  const std::string written = ep::hf_config_json(m, bert_with("\"gelu\"", "\"gelu_new\""), {"a", "b", "c"});
  const ep::HfConfig back = ep::parse_hf_config("w", written);
  CHECK(back.architecture == "BertForSequenceClassification");
  CHECK(back.labels == std::vector<std::string>{"a", "b", "c"});
  CHECK(back.model.hidden_act == ep::Activation::GeluTanh);
  CHECK(written.find("\"gelu_new\"") != std::string::npos);
  CHECK(back.hidden_dropout == 0.1);
  ep::ModelConfig seeded = m;
  seeded.family = ep::ModelFamily::ViT;
  seeded.image_size = 8;
  seeded.patch_size = 4;
  const ep::HfConfig vit = ep::parse_hf_config("v", ep::hf_config_json(seeded, "", {}));
  CHECK(vit.architecture == "ViTForImageClassification");
  CHECK(vit.labels == std::vector<std::string>{"LABEL_0", "LABEL_1", "LABEL_2"});
  CHECK(vit.hidden_dropout == 0);
}

TEST_CASE("model.checkpoint: config.json gives the model section, a key repeated must agree") {
  const ep::test::TempDir dir("hf_config");
  dir.write("config.json", kBert);
  std::ifstream in(ep::test::repo_path("configs/small/tiny_bert_synthetic.toml"));
  const std::string base{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const std::string model = "[model]\ncheckpoint = \"" + dir.path() + "\"\nseq_length = 16\n";
  const auto with_model = [&](const std::string& m) {
    const std::size_t from = base.find("[model]"), to = base.find("[data]");
    return base.substr(0, from) + m + "\n" + base.substr(to);
  };
  const ep::Config c = ep::parse_config(with_model(model), "t.toml");
  CHECK(c.model.hidden_size == 32);
  CHECK(c.model.num_labels == 2);
  CHECK(c.model.max_position_embeddings == 24);
  CHECK(c.model.checkpoint == dir.path());
  CHECK(ep::parse_config(with_model(model + "hidden_size = 32\nnum_labels = 5\n"), "t.toml").model.num_labels == 5);
  CHECK(error_of([&] { (void)ep::parse_config(with_model(model + "hidden_size = 64\n"), "t.toml"); }) ==
        "t.toml:31:15: key 'model.hidden_size': expected 32 (" + dir.file("config.json") + "), found 64");
  CHECK(error_of([&] { (void)ep::parse_config(with_model(model + "layer_norm_eps = 1e-5\n"), "t.toml"); })
            .find("key 'model.layer_norm_eps': expected 1e-12") != std::string::npos);
  CHECK(error_of([&] {
          (void)ep::parse_config(with_model("[model]\ncheckpoint = \"" + dir.path() + "\"\nseq_length = 32\n"), "t.toml");
        }).find("key 'model.seq_length': expected at most max_position_embeddings = 24") != std::string::npos);
  dir.write("config.json", bert_with("BertForSequenceClassification", "BertModel"));
  CHECK(error_of([&] { (void)ep::parse_config(with_model(model), "t.toml"); })
            .find("key 'model.num_labels': expected an integer, found nothing") != std::string::npos);
  dir.write("config.json", bert_with("\"model_type\": \"bert\"", "\"model_type\": \"t5\""));
  CHECK(error_of([&] { (void)ep::parse_config(with_model(model), "t.toml"); }) ==
        dir.file("config.json") + ": key 'model_type': expected \"bert\" or \"vit\" (BERT and ViT checkpoints), found \"t5\"");
}
