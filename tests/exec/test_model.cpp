// Models match the planner's sublayer list; weights are a function of the
// seed and survive a save/load by name; the optimizer is torch.optim's.
#include "tests/exec/pch.hpp"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "exec/model.hpp"
#include "exec/optimizer.hpp"
#include "exec/torch_compat.hpp"
#include "tests/exec/support.hpp"

namespace {

using namespace ep;

ModelConfig random_config(std::mt19937& rng, ModelFamily family) {
  ModelConfig m;
  m.family = family;
  m.num_hidden_layers = 1 + rng() % 4;
  m.num_attention_heads = 1 + rng() % 4;
  m.hidden_size = m.num_attention_heads * (2 + rng() % 6);
  m.intermediate_size = 4 + rng() % 40;
  m.num_labels = 2 + rng() % 9;
  if (family == ModelFamily::ViT) {
    m.patch_size = 2 + rng() % 3;
    m.image_size = m.patch_size * (1 + rng() % 4);
    m.num_channels = 1 + rng() % 3;
  } else {
    m.seq_length = 2 + rng() % 10;
    m.vocab_size = 5 + rng() % 50;
    m.max_position_embeddings = m.seq_length + rng() % 5;
  }
  return m;
}

std::string temp_file(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (name + std::to_string(::getpid()))).string();
}

}  // namespace

TEST_CASE("every sublayer has the planner's name and parameter count, and maps shapes as the next expects") {
  std::mt19937 rng(4);
  for (int i = 0; i < 40; ++i) {
    const ModelConfig m = random_config(rng, i % 2 ? ModelFamily::Bert : ModelFamily::ViT);
    const exec::Model model(m, i);
    const ModelSpec& spec = model.spec();
    REQUIRE(model.num_sublayers() == spec.num_sublayers());
    for (int s = 0; s < spec.num_sublayers(); ++s) {
      INFO(spec.sublayers[s].name);
      CHECK(model.sublayer(s).name() == spec.sublayers[s].name);
      CHECK(model.sublayer(s).num_params() == static_cast<std::int64_t>(spec.sublayers[s].params));
    }
    const at::Tensor x = m.family == ModelFamily::ViT
                             ? at::randn({3, m.num_channels, m.image_size, m.image_size})
                             : at::randint(0, m.vocab_size, {3, m.seq_length}, at::kLong);
    const at::Tensor hidden = model.forward({0, 1}, x);
    CHECK(hidden.sizes() == at::IntArrayRef({3, m.tokens(), m.hidden_size}));
    CHECK(model.forward({0, spec.num_sublayers()}, x).sizes() == at::IntArrayRef({3, m.num_labels}));
  }
}

TEST_CASE("the bytes at every boundary, FP32 or under BF16 autocast, are the planner's: the residual stream stays FP32") {
  // What a stage sends, a cached row holds and a checkpoint keeps: the
  // planner prices p2p, the cache and its memory with these bytes.
  std::mt19937 rng(7);
  for (int i = 0; i < 24; ++i) {
    const ModelConfig m = random_config(rng, i % 2 ? ModelFamily::Bert : ModelFamily::ViT);
    const bool bf16 = i % 4 < 2;
    const exec::Model model(m, i);
    const ModelSpec spec = build_model_spec(m, bf16 ? Precision::BF16 : Precision::FP32);
    const int B = 3;
    at::Tensor x = m.family == ModelFamily::ViT ? at::randn({B, m.num_channels, m.image_size, m.image_size})
                                                : at::randint(0, m.vocab_size, {B, m.seq_length}, at::kLong);
    const exec::compat::AutocastScope precision(c10::DeviceType::CPU, bf16);
    for (int s = 0; s + 1 < spec.num_sublayers(); ++s) {
      INFO(spec.sublayers[s].name << (bf16 ? " bf16" : " fp32"));
      x = model.forward({s, s + 1}, x);
      CHECK(x.scalar_type() == at::kFloat);
      CHECK(static_cast<double>(x.numel() * static_cast<std::int64_t>(x.element_size())) ==
            spec.sublayers[s].out_activation_bytes_per_sample * B);
    }
  }
}

TEST_CASE("weights depend on the seed only, and save/load by name restores them bit for bit") {
  std::mt19937 rng(8);
  const ModelConfig m = random_config(rng, ModelFamily::ViT);
  exec::Model a(m, 1), b(m, 1), c(m, 2);
  const auto pa = a.named_params(), pb = b.named_params(), pc = c.named_params();
  bool all_same_c = true;
  for (std::size_t i = 0; i < pa.size(); ++i) {
    CHECK(at::equal(pa[i].tensor, pb[i].tensor));
    all_same_c = all_same_c && at::equal(pa[i].tensor, pc[i].tensor);
  }
  CHECK_FALSE(all_same_c);
  const std::string path = temp_file("ep_weights_");
  a.save(path);
  CHECK(c.load(path));  // checksummed
  for (std::size_t i = 0; i < pa.size(); ++i) CHECK(at::equal(pa[i].tensor, c.named_params()[i].tensor));
  {  // The version before: magic EPWEIGHT, no CRC: still read, said unchecked.
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    bytes.replace(0, 8, "EPWEIGHT");
    bytes.resize(bytes.size() - 4);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  }
  exec::Model old_file(m, 4);
  CHECK_FALSE(old_file.load(path));
  for (std::size_t i = 0; i < pa.size(); ++i) CHECK(at::equal(pa[i].tensor, old_file.named_params()[i].tensor));
  a.save(path);

  // Another shape, a truncated file and a foreign file are refused by name.
  ModelConfig wider = m;
  wider.intermediate_size += 1;
  exec::Model w(wider, 1);
  CHECK_THROWS_WITH(w.load(path), Catch::Contains("mlp.0.fc1.weight") && Catch::Contains("shape"));
  // Four bytes overwritten inside a parameter's values: the records still
  // parse, the CRC-32 does not match, and the model is left as it was.
  exec::Model d(m, 3);
  const std::vector<at::Tensor> d_before = [&] {
    std::vector<at::Tensor> v;
    for (const auto& p : d.named_params()) v.push_back(p.tensor.clone());
    return v;
  }();
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(std::filesystem::file_size(path) - 12));  // the last parameter's last values
    f.write("\x7f\x7f\x7f\x7f", 4);
  }
  CHECK_THROWS_WITH(d.load(path), Catch::Contains("damaged: CRC-32"));
  for (std::size_t i = 0; i < d_before.size(); ++i) CHECK(at::equal(d_before[i], d.named_params()[i].tensor));
  a.save(path);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 7);
  CHECK_THROWS_WITH(c.load(path), Catch::Contains("truncated"));
  std::ofstream(path) << "not weights";
  CHECK_THROWS_WITH(c.load(path), Catch::Contains("EPWEIGH2"));
  std::filesystem::remove(path);
}

TEST_CASE("initial weights: loaded by name, kept prefixes keep their seeded values whatever the file holds") {
  std::mt19937 rng(9);
  const ModelConfig m = random_config(rng, ModelFamily::ViT);
  ModelConfig other_labels = m;
  other_labels.num_labels = m.num_labels + 3;  // a fine-tuning task with another label set
  exec::Model pretrained(m, 1), fresh(other_labels, 2), seeded(other_labels, 2);
  const std::string path = temp_file("ep_init_");
  pretrained.save(path);
  // The head differs in shape: without keeping it, the load names it.
  CHECK_THROWS_WITH(fresh.load(path), Catch::Contains("head."));
  fresh.load(path, {"head."});
  const auto loaded = fresh.named_params(), before = seeded.named_params(), source = pretrained.named_params();
  REQUIRE(loaded.size() == source.size());
  for (std::size_t i = 0; i < loaded.size(); ++i) {
    INFO(loaded[i].name);
    if (loaded[i].name.rfind("head.", 0) == 0)
      CHECK(at::equal(loaded[i].tensor, before[i].tensor));  // seeded, untouched
    else
      CHECK(at::equal(loaded[i].tensor, source[i].tensor));  // pretrained, bit for bit
  }
  // A prefix that matches nothing, another model's names, another shape,
  // a file cut short: each refused, naming what is wrong.
  CHECK_THROWS_WITH(fresh.load(path, {"classifier."}), Catch::Contains("'classifier.'"));
  ModelConfig deeper = other_labels;
  deeper.num_hidden_layers += 1;
  exec::Model d(deeper, 1);
  CHECK_THROWS_WITH(d.load(path, {"head."}), Catch::Contains("is not in the file"));
  ModelConfig shallower = other_labels;
  shallower.num_hidden_layers -= 1;
  if (shallower.num_hidden_layers >= 1) {
    exec::Model sh(shallower, 1);
    CHECK_THROWS_WITH(sh.load(path, {"head."}), Catch::Contains("is not in the model"));
  }
  ModelConfig wider = other_labels;
  wider.intermediate_size += 1;
  exec::Model w(wider, 1);
  CHECK_THROWS_WITH(w.load(path, {"head."}), Catch::Contains("fc1.weight") && Catch::Contains("shape"));
  const auto size = std::filesystem::file_size(path);
  for (const std::uintmax_t cut : {size - 3, size / 2, std::uintmax_t{20}}) {
    std::filesystem::resize_file(path, cut);
    CHECK_THROWS_WITH(fresh.load(path, {"head."}), Catch::Contains("truncated"));
  }
  std::filesystem::remove(path);
}

TEST_CASE("SGD, Adam and AdamW updates equal torch::optim's") {
  for (const ep::Optimizer kind : {ep::Optimizer::SGD, ep::Optimizer::Adam, ep::Optimizer::AdamW}) {
    INFO(to_string(kind));
    const TrainingConfig t = exec::testing::update_rule(kind);
    at::manual_seed(2);
    at::Tensor ours = at::randn({7, 5}).requires_grad_(true);
    at::Tensor theirs = ours.detach().clone().requires_grad_(true);
    exec::Optimizer opt(t);
    opt.add("w");
    std::unique_ptr<torch::optim::Optimizer> ref;
    if (kind == ep::Optimizer::SGD)
      ref = std::make_unique<torch::optim::SGD>(std::vector<at::Tensor>{theirs},
                                                torch::optim::SGDOptions(t.lr).momentum(t.momentum).weight_decay(t.weight_decay));
    else if (kind == ep::Optimizer::Adam)
      ref = std::make_unique<torch::optim::Adam>(std::vector<at::Tensor>{theirs},
                                                 torch::optim::AdamOptions(t.lr).weight_decay(t.weight_decay));
    else
      ref = std::make_unique<torch::optim::AdamW>(std::vector<at::Tensor>{theirs},
                                                  torch::optim::AdamWOptions(t.lr).weight_decay(t.weight_decay));
    for (int step = 0; step < 20; ++step) {
      const at::Tensor g = at::randn({7, 5});
      ours.mutable_grad() = g.clone();
      theirs.mutable_grad() = g.clone();
      opt.step({{"w", ours}}, t.lr);
      ref->step();
    }
    CHECK(at::allclose(ours.detach(), theirs.detach(), 1e-6, 1e-7));
  }
}

TEST_CASE("state made ahead of the first step and a warmed-up step change no update, bit for bit") {
  // A run's start makes the optimizer's state and runs its step on scratch
  // parameters (Pipeline::prepare_step): the steps after are those of an
  // optimizer that did neither.
  for (const ep::Optimizer kind : {ep::Optimizer::SGD, ep::Optimizer::Adam, ep::Optimizer::AdamW}) {
    INFO(to_string(kind));
    const TrainingConfig t = exec::testing::update_rule(kind);
    at::manual_seed(3);
    at::Tensor ahead = at::randn({7, 5}).requires_grad_(true);
    at::Tensor lazy = ahead.detach().clone().requires_grad_(true);
    exec::Optimizer a(t), b(t);
    a.add("w");
    b.add("w");
    a.warm_up(ahead.options(), true);
    a.make_state({{"w", ahead}});
    const exec::ParamState& made = a.state().at("w");
    CHECK(made.step == 0);
    CHECK(made.momentum.defined() == (kind != ep::Optimizer::SGD));
    if (made.momentum.defined()) {
      CHECK(at::equal(made.momentum, at::zeros_like(ahead)));
      CHECK(at::equal(made.second_moment, at::zeros_like(ahead)));
    }
    CHECK(a.size() == 1);
    CHECK(at::equal(ahead, lazy));
    for (int step = 0; step < 5; ++step) {
      const at::Tensor g = at::randn({7, 5});
      ahead.mutable_grad() = g.clone();
      lazy.mutable_grad() = g.clone();
      a.step({{"w", ahead}}, t.lr);
      b.step({{"w", lazy}}, t.lr);
      a.make_state({{"w", ahead}});  // made already: kept as the steps left it
    }
    CHECK(at::equal(ahead, lazy));
    CHECK(a.state().at("w").step == 5);
    if (kind != ep::Optimizer::SGD) CHECK(at::equal(a.state().at("w").second_moment, b.state().at("w").second_moment));
  }
}

TEST_CASE("the learning rate warms up linearly, then follows its schedule to zero") {
  TrainingConfig t;
  t.lr = 0.1;
  t.warmup_steps = 10;
  t.lr_schedule = LrSchedule::Cosine;
  CHECK(exec::learning_rate(t, 0, 110) == Approx(0.01));
  CHECK(exec::learning_rate(t, 9, 110) == Approx(0.1));
  CHECK(exec::learning_rate(t, 60, 110) == Approx(0.05));
  CHECK(exec::learning_rate(t, 110, 110) == Approx(0.0).margin(1e-12));
  t.lr_schedule = LrSchedule::Linear;
  CHECK(exec::learning_rate(t, 35, 110) == Approx(0.075));
  t.lr_schedule = LrSchedule::Constant;
  CHECK(exec::learning_rate(t, 100, 110) == Approx(0.1));
}

TEST_CASE("dropout drops about p of each sample's elements, by the sample's key and the site, whatever the batch") {
  const std::vector<std::int64_t> indices{0, 1, 2, 3, 4, 5, 6, 7};
  const at::Tensor keys = exec::dropout_keys(11, indices);
  const at::Tensor x = at::ones({8, 50, 64});
  for (const double p : {0.05, 0.1, 0.3, 0.5}) {
    INFO("p=" << p);
    const at::Tensor y = exec::dropout(x, keys, 123, p);
    const double dropped = y.eq(0).to(at::kDouble).mean().item<double>(), n = static_cast<double>(x.numel());
    CHECK(std::abs(dropped - p) < 5 * std::sqrt(p * (1 - p) / n));
    CHECK(at::all(y.eq(0).logical_or(y.sub(1 / (1 - p)).abs().lt(1e-6))).item<bool>());  // kept: scaled by 1/(1-p)
    for (int b = 0; b < 8; ++b) {  // alone, or in another batch: the same mask
      CHECK(at::equal(exec::dropout(x.narrow(0, b, 1), keys.narrow(0, b, 1), 123, p), y.narrow(0, b, 1)));
      const double per_sample = y[b].eq(0).to(at::kDouble).mean().item<double>();
      CHECK(std::abs(per_sample - p) < 6 * std::sqrt(p * (1 - p) / 3200.0));
    }
    CHECK(at::equal(exec::dropout(x.flip(0), keys.flip(0), 123, p), y.flip(0)));
    CHECK_FALSE(at::equal(exec::dropout(x, keys, 124, p), y));  // another site
    CHECK_FALSE(at::equal(exec::dropout(x, exec::dropout_keys(12, indices), 123, p), y));  // another epoch's seed
    CHECK_FALSE(at::equal(y[0], y[1]));  // another sample
  }
  // Masks of two sites, or two samples, are independent: both drop p².
  const at::Tensor a = exec::dropout(x, keys, 1, 0.5).eq(0), b = exec::dropout(x, keys, 2, 0.5).eq(0);
  CHECK(std::abs(a.logical_and(b).to(at::kDouble).mean().item<double>() - 0.25) < 0.01);
  CHECK(std::abs(a[0].logical_and(a[1]).to(at::kDouble).mean().item<double>() - 0.25) < 0.03);
  CHECK(at::equal(exec::dropout(x, {}, 123, 0.5), x));
  CHECK(at::equal(exec::dropout(x, keys, 123, 0), x));
  CHECK_THROWS_WITH(exec::dropout(x, keys.narrow(0, 0, 3), 1, 0.1), Catch::Contains("3 keys for a batch of 8"));
}

TEST_CASE("a model with dropout: without keys it is the model without, with keys each sample's output is its own") {
  std::mt19937 rng(9);
  for (int i = 0; i < 20; ++i) {
    const ModelFamily family = i % 2 ? ModelFamily::Bert : ModelFamily::ViT;
    const ModelConfig m = random_config(rng, family);
    INFO("case " << i);
    const exec::Model plain(m, 3), dropped(m, 3, {0.2, 0.3, 0.4});
    const std::int64_t B = 5;
    const at::Tensor x = family == ModelFamily::ViT ? at::randn({B, m.num_channels, m.image_size, m.image_size})
                                                    : at::randint(0, m.vocab_size, {B, m.seq_length}, at::kLong);
    const at::Tensor lengths = family == ModelFamily::Bert ? at::randint(1, m.seq_length + 1, {B}, at::kLong) : at::Tensor();
    const SublayerRange all{0, plain.num_sublayers()};
    const at::Tensor keys = exec::dropout_keys(5, {10, 11, 12, 13, 14});
    const at::Tensor eval = plain.forward(all, x, lengths);
    CHECK(at::equal(dropped.forward(all, x, lengths), eval));
    CHECK(at::equal(plain.forward(all, x, lengths, keys), eval));  // no rates: keys change nothing
    const at::Tensor trained = dropped.forward(all, x, lengths, keys);
    CHECK_FALSE(at::allclose(trained, eval));
    for (std::int64_t b = 0; b < B; ++b) {
      const at::Tensor nb = lengths.defined() ? lengths.narrow(0, b, 1) : at::Tensor();
      CHECK(at::allclose(dropped.forward(all, x.narrow(0, b, 1), nb, keys.narrow(0, b, 1)), trained.narrow(0, b, 1),
                         1e-5, 1e-6));
    }
  }
  CHECK_THROWS_WITH(exec::Model(exec::testing::tiny(ModelFamily::Bert), 1, {1.0, 0, 0}), Catch::Contains("expected [0, 1)"));
}
