// Hugging Face checkpoints' weights: written and read back bit for bit, and
// a missing, extra, misshapen or mistyped tensor refused naming it before
// any value is copied. Against transformers itself: tests/hf.
#include "tests/exec/pch.hpp"

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>

#include "exec/hf_weights.hpp"
#include "exec/model.hpp"
#include "planner/hf_model.hpp"
#include "planner/safetensors.hpp"
#include "tests/exec/support.hpp"
#include "tests/temp_dir.hpp"

namespace {

using namespace ep;

using exec::testing::tiny;  // 4 layers, hidden 16, 5 labels

// A checkpoint folder of `model`, as train writes one.
std::string write_checkpoint(const test::TempDir& dir, const exec::Model& model) {
  std::ofstream(dir.file("config.json")) << hf_config_json(model.spec().config, "", {});
  std::ofstream out(dir.file("model.safetensors"), std::ios::binary);
  exec::write_hf_weights(model, out, dir.file("model.safetensors"));
  return dir.path();
}

struct Stored {
  SafetensorsEntry entry;
  std::string bytes;
};

// The checkpoint's tensors edited by `edit` and written back, back to back.
void rewrite(const test::TempDir& dir, const std::function<void(std::vector<Stored>&)>& edit) {
  const std::string path = dir.file("model.safetensors");
  const SafetensorsHeader h = read_safetensors_header(path);
  std::ifstream in(path, std::ios::binary);
  const std::string file{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  std::vector<Stored> tensors;
  for (const auto& t : h.tensors) tensors.push_back({t, file.substr(h.data_start + t.begin, t.end - t.begin)});
  edit(tensors);
  std::vector<SafetensorsEntry> entries;
  std::string data;
  for (auto& t : tensors) {
    t.entry.begin = data.size();
    data += t.bytes;
    t.entry.end = data.size();
    entries.push_back(t.entry);
  }
  std::ofstream(path, std::ios::binary) << safetensors_header_bytes(entries, {}) << data;
}

std::string load_error(exec::Model& model, const std::string& dir, const std::vector<std::string>& keep = {}) {
  try {
    (void)exec::load_hf_weights(model, dir, keep);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool same_weights(const exec::Model& a, const exec::Model& b) {
  const auto pa = a.named_params(), pb = b.named_params();
  for (std::size_t i = 0; i < pa.size(); ++i)
    if (pa[i].name != pb[i].name || !at::equal(pa[i].tensor, pb[i].tensor)) return false;
  return pa.size() == pb.size();
}

}  // namespace

TEST_CASE("a model written as a Hugging Face checkpoint reads back bit for bit") {
  for (const ModelFamily family : {ModelFamily::Bert, ModelFamily::ViT}) {
    const test::TempDir dir("hf_weights");
    ModelConfig m = tiny(family);
    m.hidden_act = Activation::GeluTanh;
    const exec::Model written(m, 1);
    write_checkpoint(dir, written);
    m.checkpoint = dir.path();
    exec::Model read(m, 2);
    CHECK_FALSE(same_weights(written, read));
    const exec::HfLoaded loaded = exec::load_hf_weights(read, dir.path());
    CHECK(loaded.seeded.empty());
    CHECK(loaded.architecture == hf_classifier_architecture(family));
    CHECK(same_weights(written, read));
    CHECK(read_hf_config(dir.path()).model.hidden_act == Activation::GeluTanh);
  }
}

TEST_CASE("a checkpoint's tensor missing, extra, of another shape or dtype is refused naming it") {
  const test::TempDir dir("hf_refused");
  const ModelConfig m = tiny(ModelFamily::Bert);
  const exec::Model source(m, 1);
  write_checkpoint(dir, source);
  exec::Model model(m, 2);
  const std::string file = dir.file("model.safetensors") + ": tensor ";
  const auto refused = [&](const std::function<void(std::vector<Stored>&)>& edit) {
    write_checkpoint(dir, source);
    rewrite(dir, edit);
    return load_error(model, dir.path());
  };
  const auto named = [](std::vector<Stored>& ts, const std::string& name) -> Stored& {
    for (auto& t : ts)
      if (t.entry.name == name) return t;
    throw Error("no " + name);
  };
  CHECK(refused([&](auto& ts) { std::erase_if(ts, [](const Stored& t) { return t.entry.name == "bert.pooler.dense.bias"; }); }) ==
        file + "'bert.pooler.dense.bias': expected F32 [16] (BertForSequenceClassification has it), found none");
  CHECK(refused([&](auto& ts) { ts.push_back({{"bert.extra", "F32", {1}, 0, 0}, std::string(4, '\0')}); }) ==
        file + "'bert.extra': expected none (BertForSequenceClassification has no such tensor), found F32 [1]");
  CHECK(refused([&](auto& ts) {
          Stored& t = named(ts, "bert.encoder.layer.1.attention.self.key.weight");
          t.entry.shape = {8, 32};
        }) == file + "'bert.encoder.layer.1.attention.self.key.weight': expected shape [16, 16] (the checkpoint's "
                     "config.json), found [8, 32]");
  CHECK(refused([&](auto& ts) {
          Stored& t = named(ts, "classifier.weight");
          t.entry.shape = {6, 16};
          t.bytes += std::string(64, '\0');
        }).find(file + "'classifier.weight': expected shape [5, 16] (model.num_labels; or keep a new classifier") == 0);
  CHECK(refused([&](auto& ts) { named(ts, "bert.embeddings.LayerNorm.bias").entry.dtype = "I32"; }) ==
        file + "'bert.embeddings.LayerNorm.bias': expected dtype F32, F16, BF16 or F64, found I32");
  // Nothing was copied by any refusal.
  CHECK(same_weights(model, exec::Model(m, 2)));
  // A classifier of another size is taken new when init_keep says so.
  write_checkpoint(dir, source);
  rewrite(dir, [&](auto& ts) {
    Stored& t = named(ts, "classifier.weight");
    t.entry.shape = {6, 16};
    t.bytes += std::string(64, '\0');
  });
  CHECK(exec::load_hf_weights(model, dir.path(), {"head.classifier."}).seeded ==
        std::vector<std::string>{"head.classifier.weight", "head.classifier.bias"});
}

TEST_CASE("half-precision tensors load as float32, an unused ViT pooler is skipped, BERT ignores padded keys") {
  const test::TempDir dir("hf_half");
  ModelConfig m = tiny(ModelFamily::ViT);
  exec::Model source(m, 1);
  write_checkpoint(dir, source);
  // As a ViTModel: no classifier prefix, a pooler, the weights in bf16.
  std::string config;
  {
    std::ifstream in(dir.file("config.json"));
    config.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  config.replace(config.find("ViTForImageClassification"), 25, "ViTModel");
  std::ofstream(dir.file("config.json")) << config;
  rewrite(dir, [](std::vector<Stored>& ts) {
    std::erase_if(ts, [](const Stored& t) { return t.entry.name.rfind("classifier.", 0) == 0; });
    for (Stored& t : ts) {
      t.entry.name = t.entry.name.substr(4);  // "vit."
      const at::Tensor f = at::from_blob(t.bytes.data(), {static_cast<std::int64_t>(t.bytes.size() / 4)}, at::kFloat);
      const at::Tensor h = f.to(at::kBFloat16);
      t.bytes.assign(static_cast<const char*>(h.data_ptr()), h.numel() * 2);
      t.entry.dtype = "BF16";
    }
    ts.push_back({{"pooler.dense.weight", "F32", {16, 16}, 0, 0}, std::string(1024, '\0')});
    ts.push_back({{"pooler.dense.bias", "F32", {16}, 0, 0}, std::string(64, '\0')});
  });
  exec::Model model(m, 2);
  const exec::HfLoaded loaded = exec::load_hf_weights(model, dir.path());
  CHECK(loaded.unused == std::vector<std::string>{"pooler.dense.weight", "pooler.dense.bias"});
  CHECK(loaded.seeded == std::vector<std::string>{"head.classifier.weight", "head.classifier.bias"});
  const auto a = source.named_params(), b = model.named_params();
  for (std::size_t i = 0; i + 2 < a.size(); ++i)
    CHECK(at::allclose(a[i].tensor, b[i].tensor, 1e-2, 1e-3));

  // Padding: a sample's logits do not depend on what its padded tokens are.
  const exec::Model bert(tiny(ModelFamily::Bert), 3);
  at::Tensor ids = at::randint(1, 30, {2, 6}, at::kLong);
  const at::Tensor lengths = at::tensor(std::vector<std::int64_t>{6, 3});
  const at::Tensor before = bert.forward({0, bert.num_sublayers()}, ids, lengths);
  ids.index_put_({1, at::indexing::Slice(3)}, 7);
  const at::Tensor after = bert.forward({0, bert.num_sublayers()}, ids, lengths);
  CHECK(at::equal(before, after));
  CHECK_FALSE(at::equal(before, bert.forward({0, bert.num_sublayers()}, ids)));
}

TEST_CASE("the checkpoint's dropout: its config.json's rates, BERT's classifier one as transformers takes it") {
  const auto dropout_with = [](ModelFamily family, const std::function<void(nlohmann::json&)>& edit) {
    const test::TempDir dir("hf-dropout");
    nlohmann::json config = nlohmann::json::parse(hf_config_json(tiny(family), "", {}));
    edit(config);
    std::ofstream(dir.file("config.json")) << config.dump();
    return exec::checkpoint_dropout(dir.path());
  };
  const auto error_of = [&](ModelFamily family, const std::function<void(nlohmann::json&)>& edit) {
    try {
      (void)dropout_with(family, edit);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_FALSE(exec::checkpoint_dropout("").any());
  CHECK_FALSE(dropout_with(ModelFamily::Bert, [](nlohmann::json&) {}).any());  // ElasticPipe writes none
  const auto rates = [](nlohmann::json& c) {
    c["hidden_dropout_prob"] = 0.1;
    c["attention_probs_dropout_prob"] = 0.2;
  };
  exec::Dropout d = dropout_with(ModelFamily::Bert, rates);
  CHECK((d.hidden == 0.1 && d.attention == 0.2 && d.classifier == 0.1));  // no classifier_dropout: the hidden one
  d = dropout_with(ModelFamily::Bert, [&](nlohmann::json& c) { rates(c); c["classifier_dropout"] = nullptr; });
  CHECK(d.classifier == 0.1);
  d = dropout_with(ModelFamily::Bert, [&](nlohmann::json& c) { rates(c); c["classifier_dropout"] = 0.3; });
  CHECK(d.classifier == 0.3);
  d = dropout_with(ModelFamily::ViT, rates);
  CHECK((d.hidden == 0.1 && d.attention == 0.2 && d.classifier == 0));  // ViT's classifier has none
  CHECK_THAT(error_of(ModelFamily::Bert, [](nlohmann::json& c) { c["hidden_dropout_prob"] = 1.0; }),
             Catch::Contains("config.json: key 'hidden_dropout_prob': expected a probability in [0, 1), found 1.0"));
  CHECK_THAT(error_of(ModelFamily::ViT, [](nlohmann::json& c) { c["attention_probs_dropout_prob"] = -0.1; }),
             Catch::Contains("key 'attention_probs_dropout_prob': expected a probability in [0, 1)"));
  CHECK_THAT(error_of(ModelFamily::Bert, [](nlohmann::json& c) { c["classifier_dropout"] = "high"; }),
             Catch::Contains("key 'classifier_dropout': expected a probability in [0, 1), found \"high\""));
}
