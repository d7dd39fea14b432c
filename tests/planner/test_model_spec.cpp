#include <catch2/catch.hpp>

#include <random>

#include "planner/model_spec.hpp"
#include "tests/planner/support.hpp"

using namespace ep;
using namespace ep::test;

namespace {



double forward_flops(const ModelSpec& spec) {
  double sum = 0;
  for (const auto& s : spec.sublayers) sum += s.fwd_flops_per_sample;
  return sum;
}

}  // namespace

TEST_CASE("parameter counts match the published models within 2%", "[model_spec]") {
  CHECK(build_model_spec(vit_b16(), Precision::FP32).total_params() ==
        Approx(86.6e6).epsilon(0.02));
  CHECK(build_model_spec(bert(12, 768, 3072, 12), Precision::FP32).total_params() ==
        Approx(109.5e6).epsilon(0.02));
  CHECK(build_model_spec(bert(24, 1024, 4096, 16), Precision::FP32).total_params() ==
        Approx(335e6).epsilon(0.02));
}

TEST_CASE("parameter counts are exactly HF's", "[model_spec]") {
  // ViTForImageClassification / BertForSequenceClassification num_parameters().
  CHECK(build_model_spec(vit_b16(), Precision::FP32).total_params() == 86567656);
  CHECK(build_model_spec(bert(12, 768, 3072, 12), Precision::FP32).total_params() == 109483778);
}

TEST_CASE("sublayers are stem, att.i, mlp.i ..., head", "[model_spec]") {
  const ModelSpec spec = build_model_spec(vit_b16(), Precision::FP32);
  REQUIRE(spec.num_sublayers() == 2 * 12 + 2);
  CHECK(spec.num_layers() == 12);
  CHECK(spec.sublayers.front().name == "stem");
  CHECK(spec.sublayers.front().kind == SublayerKind::Stem);
  CHECK(spec.sublayers.front().layer == -1);
  CHECK(spec.sublayers[spec.head_sublayer()].name == "head");
  CHECK(spec.sublayers[spec.head_sublayer()].kind == SublayerKind::Head);
  CHECK(spec.sublayers[spec.head_sublayer()].layer == 12);
  for (int i = 0; i < 12; ++i) {
    const Sublayer& att = spec.sublayers[ModelSpec::first_sublayer_of_layer(i)];
    const Sublayer& mlp = spec.sublayers[ModelSpec::first_sublayer_of_layer(i) + 1];
    CHECK(att.name == "att." + std::to_string(i));
    CHECK(att.kind == SublayerKind::Attention);
    CHECK(att.layer == i);
    CHECK(mlp.name == "mlp." + std::to_string(i));
    CHECK(mlp.kind == SublayerKind::Mlp);
    CHECK(mlp.layer == i);
  }
  CHECK(ModelSpec::frozen_prefix(0).empty());
  CHECK(ModelSpec::frozen_prefix(3) == SublayerRange{0, 7});
  CHECK(spec.params(ModelSpec::frozen_prefix(12)) + spec.sublayers.back().params ==
        spec.total_params());
}

TEST_CASE("ViT-B/16 forward is ~35 GFLOP per image (17.6 GMAC)", "[model_spec]") {
  CHECK(forward_flops(build_model_spec(vit_b16(), Precision::FP32)) ==
        Approx(2 * 17.6e9).epsilon(0.05));
}

TEST_CASE("BERT forward per token is ~2 x non-embedding params + attention", "[model_spec]") {
  // Kaplan et al. 2020: C_forward ≈ 2·N + 2·n_layer·n_ctx·d_model per token,
  // N without embeddings; embedding lookups cost no FLOPs.
  const ModelConfig m = bert(12, 768, 3072, 12);
  const ModelSpec spec = build_model_spec(m, Precision::FP32);
  const double N = spec.total_params() - spec.sublayers.front().params;
  const double kaplan = 2 * N + 2.0 * m.num_hidden_layers * m.seq_length * m.hidden_size;
  CHECK(forward_flops(spec) / m.seq_length == Approx(kaplan).epsilon(0.03));
}

TEST_CASE("backward is twice forward, except the stem", "[model_spec]") {
  const ModelSpec spec = build_model_spec(vit_b16(), Precision::FP32);
  CHECK(spec.sublayers[0].bwd_flops_per_sample == spec.sublayers[0].fwd_flops_per_sample);
  for (int i = 1; i < spec.num_sublayers(); ++i)
    CHECK(spec.sublayers[i].bwd_flops_per_sample == 2 * spec.sublayers[i].fwd_flops_per_sample);
}

TEST_CASE("activation sizes: boundary and saved bytes", "[model_spec]") {
  const ModelSpec spec = build_model_spec(vit_b16(), Precision::FP32);
  const double s = 197, h = 768, a = 12;
  const Sublayer& att = spec.sublayers[ModelSpec::first_sublayer_of_layer(0)];
  const Sublayer& mlp = spec.sublayers[ModelSpec::first_sublayer_of_layer(0) + 1];
  CHECK(att.out_activation_bytes_per_sample == s * h * 4);
  CHECK(spec.sublayers.back().out_activation_bytes_per_sample == 1000 * 4);
  CHECK(spec.input_bytes_per_sample_of(0) == 3 * 224 * 224 * 4);
  CHECK(spec.input_bytes_per_sample_of(1) == s * h * 4);
  // Korthikanti et al. 2022 per layer, dropout masks left out: 16·sh + 2·as².
  CHECK(att.saved_activation_bytes_per_sample + mlp.saved_activation_bytes_per_sample ==
        Approx((16 * s * h + 2 * a * s * s) * 4));
}

TEST_CASE("BF16 halves saved activation bytes, not the FP32 residual stream at boundaries, parameters or FLOPs", "[model_spec]") {
  for (const ModelConfig& m : {vit_b16(), bert(12, 768, 3072, 12)}) {
    const ModelSpec fp32 = build_model_spec(m, Precision::FP32);
    const ModelSpec bf16 = build_model_spec(m, Precision::BF16);
    REQUIRE(fp32.num_sublayers() == bf16.num_sublayers());
    for (int i = 0; i < fp32.num_sublayers(); ++i) {
      const Sublayer& f = fp32.sublayers[i];
      const Sublayer& b = bf16.sublayers[i];
      // Every boundary carries the residual stream, which autocast keeps in
      // FP32; only the head's output (the logits, no boundary) is BF16.
      CHECK(b.out_activation_bytes_per_sample ==
            (f.kind == SublayerKind::Head ? f.out_activation_bytes_per_sample / 2 : f.out_activation_bytes_per_sample));
      CHECK(b.saved_activation_bytes_per_sample == f.saved_activation_bytes_per_sample / 2);
      CHECK(b.params == f.params);
      CHECK(b.fwd_flops_per_sample == f.fwd_flops_per_sample);
    }
    CHECK(bf16.input_bytes_per_sample == fp32.input_bytes_per_sample);
  }
}

TEST_CASE("random small configs: closed-form params, every field positive", "[model_spec]") {
  std::mt19937 rng(7);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int trial = 0; trial < 200; ++trial) {
    ModelConfig m = trial % 2 == 0 ? vit_b16() : bert(1, 1, 1, 1);
    m.num_hidden_layers = pick(1, 6);
    m.num_attention_heads = pick(1, 4);
    m.hidden_size = m.num_attention_heads * pick(1, 16);
    m.intermediate_size = pick(1, 128);
    m.num_labels = pick(1, 10);
    m.patch_size = 1 << pick(1, 3);
    m.image_size = m.patch_size * pick(1, 4);
    m.num_channels = pick(1, 3);
    m.seq_length = pick(1, 32);
    m.vocab_size = pick(2, 100);
    m.max_position_embeddings = m.seq_length + pick(0, 8);
    const ModelSpec spec = build_model_spec(m, trial % 3 ? Precision::FP32 : Precision::BF16);

    const double H = m.hidden_size, I = m.intermediate_size, c = m.num_labels;
    const double layer = 4 * H * H + 2 * H * I + 9 * H + I;
    const double stem =
        m.family == ModelFamily::ViT
            ? m.num_channels * m.patch_size * m.patch_size * H + 2 * H + m.tokens() * H
            : (m.vocab_size + m.max_position_embeddings + m.type_vocab_size + 2) * H;
    const double head = m.family == ModelFamily::ViT ? 2 * H + H * c + c : H * H + H + H * c + c;
    INFO("trial " << trial);
    CHECK(spec.total_params() == Approx(stem + m.num_hidden_layers * layer + head));
    double sum = 0;
    for (const Sublayer& s : spec.sublayers) {
      INFO(s);
      sum += s.params;
      CHECK(s.params > 0);
      CHECK(s.fwd_flops_per_sample > 0);
      CHECK(s.bwd_flops_per_sample > 0);
      CHECK(s.out_activation_bytes_per_sample > 0);
      CHECK(s.saved_activation_bytes_per_sample > 0);
    }
    CHECK(sum == spec.total_params());
    CHECK(spec.input_bytes_per_sample > 0);
  }
}
