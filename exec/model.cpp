#include "exec/model.hpp"

#include "exec/crc32.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <numbers>
#include <set>

#include "exec/torch_compat.hpp"
#include "planner/error.hpp"
#include "planner/input_file.hpp"
#include "planner/random.hpp"

namespace ep::exec {
namespace {


// FNV-1a of the name mixed with the seed: the parameter's own stream.
std::uint64_t stream_seed(std::uint64_t seed, const std::string& name) {
  std::uint64_t h = 1469598103934665603ULL;
  for (const unsigned char ch : name) h = (h ^ ch) * 1099511628211ULL;
  return mix64(seed ^ h);
}

// N(0, std) by Box-Muller on 53-bit uniforms: the same values everywhere.
at::Tensor normal_tensor(const std::vector<std::int64_t>& shape, double std, std::uint64_t seed) {
  at::Tensor t = at::empty(shape, at::kFloat);
  float* out = t.data_ptr<float>();
  const std::int64_t n = t.numel();
  SplitMix64 rng(seed);
  const auto uniform = [&] { return rng.uniform(); };
  for (std::int64_t i = 0; i < n; i += 2) {
    const double r = std::sqrt(-2.0 * std::log(uniform()));
    const double a = 2.0 * std::numbers::pi * uniform();
    out[i] = static_cast<float>(std * r * std::cos(a));
    if (i + 1 < n) out[i + 1] = static_cast<float>(std * r * std::sin(a));
  }
  return t;
}

// Dropout's masks: a 31-bit integer hash (Mueller's, on 31 bits so that no
// int64 product overflows), the same on every device. In place.
constexpr std::int64_t k31 = 0x7fffffff;
void hash31_(at::Tensor& h) {
  for (int round = 0; round < 2; ++round) {
    h.bitwise_xor_(at::bitwise_right_shift(h, 16));
    h.mul_(0x45d9f3b);
    h.bitwise_and_(k31);
  }
  h.bitwise_xor_(at::bitwise_right_shift(h, 16));
}

// A dropout site's own salt: sublayer name and site.
std::int64_t salt_of(const std::string& sublayer, const char* site) {
  return static_cast<std::int64_t>(stream_seed(0, sublayer + "/" + site) & k31);
}

at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, double eps) {
  return at::layer_norm(x, {x.size(-1)}, w, b, eps);
}

// Where each sample's padding starts: bool [B, 1, 1, S], true for a real
// token (a key attention may look at); undefined where nothing is padded.
at::Tensor key_mask(const at::Tensor& lengths, std::int64_t S) {
  if (!lengths.defined()) return {};
  return at::arange(S, lengths.options()).unsqueeze(0).lt(lengths.unsqueeze(1)).view({lengths.size(0), 1, 1, S});
}

// Multi-head self-attention on [B, S, H] with a fused QKV projection;
// with dropout on its weights (p > 0 and keys) as products and a softmax,
// since the fused kernels draw their own masks.
// q, k and v come from one unbind, as torch.nn code splits them: its
// backward stacks their three gradients into the projection's once, where
// three selects would each fill a zero tensor of the projection's whole
// size and autograd would add the three (per layer about 1 GB of memory
// traffic more at ViT-B/16, batch 128, bf16).
at::Tensor attention(const at::Tensor& x, const at::Tensor& qkv_w, const at::Tensor& qkv_b,
                     const at::Tensor& out_w, const at::Tensor& out_b, int heads, const at::Tensor& lengths,
                     const at::Tensor& keys, std::int64_t salt, double p) {
  const std::int64_t B = x.size(0), S = x.size(1), H = x.size(2), d = H / heads;
  const std::vector<at::Tensor> qkv =
      at::linear(x, qkv_w, qkv_b).view({B, S, 3, heads, d}).permute({2, 0, 3, 1, 4}).unbind(0);
  const at::Tensor &q = qkv[0], &k = qkv[1], &v = qkv[2];  // [B, heads, S, d]
  const at::Tensor context =
      keys.defined() && p > 0
          ? compat::attention_products(q, k, v, key_mask(lengths, S),
                                       [&](const at::Tensor& w) { return dropout(w, keys, salt, p); })
          : compat::attention(q, k, v, key_mask(lengths, S));
  return at::linear(context.transpose(1, 2).reshape({B, S, H}), out_w, out_b);
}

struct Dims {
  std::int64_t H, I, heads, classes;
  bool pre_ln;  // ViT: pre-LN; BERT: post-LN
  double ln_eps;
  bool gelu_tanh;
  Dropout dropout;
};

class Attention final : public Sublayer {
 public:
  Attention(const std::string& name, const Dims& d, std::uint64_t seed)
      : Sublayer(name), d_(d), weights_salt_(salt_of(name, "weights")), out_salt_(salt_of(name, "out")) {
    add("qkv.weight", {3 * d.H, d.H}, Init::Normal, seed);
    add("qkv.bias", {3 * d.H}, Init::Zeros, seed);
    add("out.weight", {d.H, d.H}, Init::Normal, seed);
    add("out.bias", {d.H}, Init::Zeros, seed);
    add("ln.weight", {d.H}, Init::Ones, seed);
    add("ln.bias", {d.H}, Init::Zeros, seed);
  }
  at::Tensor forward(const at::Tensor& x, const at::Tensor& lengths, const at::Tensor& keys) const override {
    const auto& p = params();
    const auto attn = [&](const at::Tensor& in) {
      const at::Tensor out = attention(in, p[0].tensor, p[1].tensor, p[2].tensor, p[3].tensor,
                                       static_cast<int>(d_.heads), lengths, keys, weights_salt_, d_.dropout.attention);
      return dropout(out, keys, out_salt_, d_.dropout.hidden);
    };
    if (d_.pre_ln) return x + attn(layer_norm(x, p[4].tensor, p[5].tensor, d_.ln_eps));
    return layer_norm(x + attn(x), p[4].tensor, p[5].tensor, d_.ln_eps);
  }

 private:
  Dims d_;
  std::int64_t weights_salt_, out_salt_;
};

class Mlp final : public Sublayer {
 public:
  Mlp(const std::string& name, const Dims& d, std::uint64_t seed) : Sublayer(name), d_(d), salt_(salt_of(name, "out")) {
    add("fc1.weight", {d.I, d.H}, Init::Normal, seed);
    add("fc1.bias", {d.I}, Init::Zeros, seed);
    add("fc2.weight", {d.H, d.I}, Init::Normal, seed);
    add("fc2.bias", {d.H}, Init::Zeros, seed);
    add("ln.weight", {d.H}, Init::Ones, seed);
    add("ln.bias", {d.H}, Init::Zeros, seed);
  }
  at::Tensor forward(const at::Tensor& x, const at::Tensor& /*lengths*/, const at::Tensor& keys) const override {
    const auto& p = params();
    const auto mlp = [&](const at::Tensor& in) {
      const at::Tensor h = at::linear(in, p[0].tensor, p[1].tensor);
      return dropout(at::linear(d_.gelu_tanh ? at::gelu(h, "tanh") : at::gelu(h), p[2].tensor, p[3].tensor), keys,
                     salt_, d_.dropout.hidden);
    };
    if (d_.pre_ln) return x + mlp(layer_norm(x, p[4].tensor, p[5].tensor, d_.ln_eps));
    return layer_norm(x + mlp(x), p[4].tensor, p[5].tensor, d_.ln_eps);
  }

 private:
  Dims d_;
  std::int64_t salt_;
};

class VitStem final : public Sublayer {
 public:
  VitStem(const ModelConfig& m, const Dims& d, std::uint64_t seed)
      : Sublayer("stem"), patch_(m.patch_size), p_(d.dropout.hidden), salt_(salt_of("stem", "out")) {
    add("patch.weight", {d.H, m.num_channels, m.patch_size, m.patch_size}, Init::Normal, seed);
    add("patch.bias", {d.H}, Init::Zeros, seed);
    add("cls_token", {1, 1, d.H}, Init::Normal, seed);
    add("position", {1, m.tokens(), d.H}, Init::Normal, seed);
  }
  at::Tensor forward(const at::Tensor& x, const at::Tensor& /*lengths*/, const at::Tensor& keys) const override {
    const auto& p = params();
    const at::Tensor patches = at::conv2d(x, p[0].tensor, p[1].tensor, {patch_, patch_})
                                   .flatten(2)
                                   .transpose(1, 2);  // [B, N, H]
    const at::Tensor cls = p[2].tensor.expand({x.size(0), 1, p[2].tensor.size(2)});
    return dropout(at::cat({cls, patches}, 1) + p[3].tensor, keys, salt_, p_);
  }

 private:
  std::int64_t patch_;
  double p_;
  std::int64_t salt_;
};

class BertStem final : public Sublayer {
 public:
  BertStem(const ModelConfig& m, const Dims& d, std::uint64_t seed)
      : Sublayer("stem"), d_(d), salt_(salt_of("stem", "out")) {
    add("word.weight", {m.vocab_size, d.H}, Init::Normal, seed);
    add("position.weight", {m.max_position_embeddings, d.H}, Init::Normal, seed);
    add("token_type.weight", {m.type_vocab_size, d.H}, Init::Normal, seed);
    add("ln.weight", {d.H}, Init::Ones, seed);
    add("ln.bias", {d.H}, Init::Zeros, seed);
  }
  // Token types are all 0: single-segment inputs. Padding is embedded as
  // any token (attention then skips it), as Hugging Face's BERT does.
  at::Tensor forward(const at::Tensor& ids, const at::Tensor& /*lengths*/, const at::Tensor& keys) const override {
    const auto& p = params();
    const std::int64_t S = ids.size(1);
    const at::Tensor positions = at::arange(S, ids.options().dtype(at::kLong));
    const at::Tensor x = at::embedding(p[0].tensor, ids) + at::embedding(p[1].tensor, positions) +
                         p[2].tensor[0];
    return dropout(layer_norm(x, p[3].tensor, p[4].tensor, d_.ln_eps), keys, salt_, d_.dropout.hidden);
  }

 private:
  Dims d_;
  std::int64_t salt_;
};

class VitHead final : public Sublayer {
 public:
  VitHead(const Dims& d, std::uint64_t seed) : Sublayer("head"), d_(d) {
    add("ln.weight", {d.H}, Init::Ones, seed);
    add("ln.bias", {d.H}, Init::Zeros, seed);
    add("classifier.weight", {d.classes, d.H}, Init::Normal, seed);
    add("classifier.bias", {d.classes}, Init::Zeros, seed);
  }
  // No dropout: ViTForImageClassification's classifier has none.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& /*lengths*/, const at::Tensor& /*keys*/) const override {
    const auto& p = params();
    const at::Tensor cls = x.select(1, 0);
    return at::linear(layer_norm(cls, p[0].tensor, p[1].tensor, d_.ln_eps), p[2].tensor, p[3].tensor);
  }

 private:
  Dims d_;
};

class BertHead final : public Sublayer {
 public:
  BertHead(const Dims& d, std::uint64_t seed)
      : Sublayer("head"), p_(d.dropout.classifier), salt_(salt_of("head", "pooled")) {
    add("pooler.weight", {d.H, d.H}, Init::Normal, seed);
    add("pooler.bias", {d.H}, Init::Zeros, seed);
    add("classifier.weight", {d.classes, d.H}, Init::Normal, seed);
    add("classifier.bias", {d.classes}, Init::Zeros, seed);
  }
  at::Tensor forward(const at::Tensor& x, const at::Tensor& /*lengths*/, const at::Tensor& keys) const override {
    const auto& p = params();
    const at::Tensor pooled = at::tanh(at::linear(x.select(1, 0), p[0].tensor, p[1].tensor));
    return at::linear(dropout(pooled, keys, salt_, p_), p[2].tensor, p[3].tensor);
  }

 private:
  double p_;
  std::int64_t salt_;
};

// Version 1 (no checksum) is still read; version 2 closes with a CRC-32.
constexpr char kWeightsMagicV1[8] = {'E', 'P', 'W', 'E', 'I', 'G', 'H', 'T'};
constexpr char kWeightsMagic[8] = {'E', 'P', 'W', 'E', 'I', 'G', 'H', '2'};

}  // namespace

std::int64_t Sublayer::num_params() const {
  std::int64_t n = 0;
  for (const auto& p : params_) n += p.tensor.numel();
  return n;
}

void Sublayer::to(const at::Device& device) {
  for (auto& p : params_)
    if (p.tensor.device() != device) p.tensor.set_data(p.tensor.data().to(device));
}

void Sublayer::set_requires_grad(bool trainable) {
  for (auto& p : params_) {
    p.tensor.requires_grad_(trainable);
    if (!trainable) p.tensor.mutable_grad().reset();
  }
}

at::Tensor Sublayer::add(const std::string& local_name, std::vector<std::int64_t> shape, Init init,
                         std::uint64_t seed) {
  const std::string full = name_ + "." + local_name;
  at::Tensor t = init == Init::Normal ? normal_tensor(shape, 0.02, stream_seed(seed, full))
                 : init == Init::Zeros ? at::zeros(shape, at::kFloat)
                                       : at::ones(shape, at::kFloat);
  params_.push_back({full, t});
  return t;
}

at::Tensor dropout(const at::Tensor& x, const at::Tensor& keys, std::int64_t salt, double p) {
  if (!keys.defined() || p == 0) return x;
  const std::int64_t B = x.size(0), n = x.numel() / std::max<std::int64_t>(B, 1);
  if (keys.numel() != B) throw Error("dropout: " + std::to_string(keys.numel()) + " keys for a batch of " + std::to_string(B));
  at::Tensor place = at::arange(n, keys.options().dtype(at::kLong));
  hash31_(place);
  at::Tensor sample = at::bitwise_xor(keys, salt);
  hash31_(sample);
  at::Tensor h = at::bitwise_xor(place.unsqueeze(0), sample.unsqueeze(1));  // [B, n]
  hash31_(h);
  const at::Tensor keep = h.ge(static_cast<std::int64_t>(std::llround(p * 2147483648.0))).view(x.sizes());
  return x * keep * (1.0 / (1.0 - p));
}

std::uint64_t dropout_seed(std::uint64_t seed, int epoch) {
  return mix64(seed ^ mix64(0xD50F0000ULL + static_cast<std::uint64_t>(epoch)));
}

at::Tensor dropout_keys(std::uint64_t seed, const std::vector<std::int64_t>& indices, bool pinned) {
  at::Tensor keys = at::empty({static_cast<std::int64_t>(indices.size())},
                              at::TensorOptions().dtype(at::kLong).pinned_memory(pinned));
  auto* k = keys.data_ptr<std::int64_t>();
  for (std::size_t i = 0; i < indices.size(); ++i)
    k[i] = static_cast<std::int64_t>(mix64(seed ^ mix64(static_cast<std::uint64_t>(indices[i]) + 1)) & k31);
  return keys;
}

Model::Model(const ModelConfig& m, std::uint64_t seed, const Dropout& dropout)
    : spec_(build_model_spec(m, Precision::FP32)), dropout_(dropout) {
  for (const double p : {dropout.hidden, dropout.attention, dropout.classifier})
    if (!(p >= 0 && p < 1)) throw Error("model: a dropout probability of " + std::to_string(p) + ", expected [0, 1)");
  const bool vit = m.family == ModelFamily::ViT;
  const Dims d{m.hidden_size, m.intermediate_size, m.num_attention_heads, m.num_labels, vit, m.layer_norm_eps,
               m.hidden_act == Activation::GeluTanh, dropout};
  if (vit) sublayers_.push_back(std::make_unique<VitStem>(m, d, seed));
  else sublayers_.push_back(std::make_unique<BertStem>(m, d, seed));
  for (int l = 0; l < m.num_hidden_layers; ++l) {
    sublayers_.push_back(std::make_unique<Attention>("att." + std::to_string(l), d, seed));
    sublayers_.push_back(std::make_unique<Mlp>("mlp." + std::to_string(l), d, seed));
  }
  if (vit) sublayers_.push_back(std::make_unique<VitHead>(d, seed));
  else sublayers_.push_back(std::make_unique<BertHead>(d, seed));
  for (std::size_t i = 0; i < sublayers_.size(); ++i)
    if (sublayers_[i]->name() != spec_.sublayers[i].name)
      throw Error("model: sublayer " + std::to_string(i) + " is '" + sublayers_[i]->name() +
                  "', the planner's is '" + spec_.sublayers[i].name + "'");
}

at::Tensor Model::forward(SublayerRange range, at::Tensor x, const at::Tensor& lengths, const at::Tensor& keys) const {
  for (int i = range.first; i < range.last; ++i) x = sublayers_[i]->forward(x, lengths, keys);
  return x;
}

std::vector<NamedTensor> Model::named_params() const {
  std::vector<NamedTensor> all;
  for (const auto& s : sublayers_) all.insert(all.end(), s->params().begin(), s->params().end());
  return all;
}

// Layout (little-endian): "EPWEIGH2", u64 count, then per parameter:
// u32 name length, name bytes, u32 ndim, i64 dims[ndim], f32 values; then
// a u32 CRC-32 of everything before it. "EPWEIGHT" (version 1) is the same
// without the CRC.
void Model::save(const std::string& path) const {
  std::vector<std::uint8_t> bytes;
  const auto put = [&](const void* p, std::size_t n) {
    const auto* b = static_cast<const std::uint8_t*>(p);
    bytes.insert(bytes.end(), b, b + n);
  };
  const std::vector<NamedTensor> all = named_params();
  const std::uint64_t count = all.size();
  put(kWeightsMagic, sizeof kWeightsMagic);
  put(&count, sizeof count);
  for (const auto& p : all) {
    const at::Tensor t = p.tensor.detach().to(at::kCPU, at::kFloat).contiguous();
    const auto len = static_cast<std::uint32_t>(p.name.size());
    const auto ndim = static_cast<std::uint32_t>(t.dim());
    put(&len, sizeof len);
    put(p.name.data(), len);
    put(&ndim, sizeof ndim);
    put(t.sizes().data(), ndim * sizeof(std::int64_t));
    put(t.data_ptr<float>(), t.numel() * sizeof(float));
  }
  const std::uint32_t crc = crc32_of(bytes.data(), bytes.size());
  put(&crc, sizeof crc);
  std::ofstream out(path, std::ios::binary);
  if (!out) throw Error(path + ": cannot open for writing");
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) throw Error(path + ": write failed");
}

void Model::check_keep(const std::vector<std::string>& keep) const {
  const std::vector<NamedTensor> params = named_params();
  for (const std::string& k : keep)
    if (std::none_of(params.begin(), params.end(), [&](const NamedTensor& p) { return p.name.rfind(k, 0) == 0; })) {
      std::set<std::string> starts;  // "att.", "head.", ...
      for (const NamedTensor& p : params) starts.insert(p.name.substr(0, p.name.find('.') + 1));
      std::string names;
      for (const std::string& s : starts) names += (names.empty() ? "" : ", ") + s;
      throw Error("'" + k + "' is the start of no parameter name of this model (they start with " + names + ")");
    }
}

bool Model::load(const std::string& path, const std::vector<std::string>& keep) {
  const auto kept = [&](const std::string& name) {
    return std::any_of(keep.begin(), keep.end(), [&](const std::string& k) { return name.rfind(k, 0) == 0; });
  };
  std::map<std::string, at::Tensor> by_name;  // the parameters the file must give
  for (const auto& p : named_params())
    if (!kept(p.name)) by_name.emplace(p.name, p.tensor);
  check_keep(keep);
  // This model's weights, and as many bytes again for the parameters kept
  // from the model (a head for other labels may have another shape).
  std::int64_t model_bytes = 16;
  for (const auto& p : named_params())
    model_bytes += 4 + static_cast<std::int64_t>(p.name.size()) + 4 + 8 * p.tensor.dim() + 4 * p.tensor.numel();
  InputFile in(path, {"weights file", 2 * model_bytes + 4, "this model's parameters, some kept ones of other shapes"});
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(in.size()));
  in.read_exactly(bytes.data(), bytes.size());
  std::uint64_t position = 0;
  const bool v1 = bytes.size() >= sizeof kWeightsMagicV1 &&
                  std::memcmp(bytes.data(), kWeightsMagicV1, sizeof kWeightsMagicV1) == 0;
  // The records end before the CRC (version 2).
  const std::uint64_t file_size = v1 || bytes.size() < 4 ? bytes.size() : bytes.size() - 4;
  const auto get = [&](void* p, std::size_t n, const std::string& what) {
    if (n > file_size - position) throw Error(path + ": truncated while reading " + what);
    std::memcpy(p, bytes.data() + position, n);
    position += n;
  };
  if (!v1 && (bytes.size() < sizeof kWeightsMagic + 4 ||
              std::memcmp(bytes.data(), kWeightsMagic, sizeof kWeightsMagic) != 0))
    throw Error(path + ": not an ElasticPipe weights file (expected magic EPWEIGH2 or EPWEIGHT)");
  position = sizeof kWeightsMagic;
  std::uint64_t count = 0;
  get(&count, sizeof count, "the header");
  if (count > file_size) throw Error(path + ": truncated: it says " + std::to_string(count) + " parameters");
  // Every record is read and checked, and the CRC, before any parameter
  // changes: a damaged file leaves the model as it was.
  std::vector<std::pair<at::Tensor, at::Tensor>> staged;  // parameter, values
  std::set<std::string> loaded;
  for (std::uint64_t i = 0; i < count; ++i) {
    std::uint32_t len = 0, ndim = 0;
    get(&len, sizeof len, "parameter " + std::to_string(i));
    if (len > 4096) throw Error(path + ": parameter " + std::to_string(i) + ": name length " + std::to_string(len));
    std::string name(len, '\0');
    get(name.data(), len, "parameter " + std::to_string(i));
    const auto it = by_name.find(name);
    if (it == by_name.end() && !kept(name)) throw Error(path + ": parameter '" + name + "' is not in the model");
    get(&ndim, sizeof ndim, name);
    if (ndim > 8) throw Error(path + ": parameter '" + name + "': " + std::to_string(ndim) + " dimensions");
    std::vector<std::int64_t> dims(ndim);
    get(dims.data(), ndim * sizeof(std::int64_t), name);
    // Within what is left of the file before anything is allocated: a
    // damaged header must not ask for terabytes.
    std::uint64_t numel = 1;
    const std::uint64_t left = file_size - position;
    for (const std::int64_t d : dims) {
      if (d < 0) throw Error(path + ": parameter '" + name + "': dimension " + std::to_string(d));
      numel = d == 0 ? 0 : numel > left / static_cast<std::uint64_t>(d) ? left + 1 : numel * static_cast<std::uint64_t>(d);
    }
    if (numel > left / sizeof(float)) throw Error(path + ": truncated while reading " + name);
    if (it != by_name.end() && at::IntArrayRef(dims) != it->second.sizes())
      throw Error(path + ": parameter '" + name + "': shape " + c10::str(at::IntArrayRef(dims)) +
                  ", the model's is " + c10::str(it->second.sizes()));
    at::Tensor values = at::empty(dims, at::kFloat);
    get(values.data_ptr<float>(), values.numel() * sizeof(float), name);
    if (it == by_name.end()) continue;  // kept: its seeded values stay
    if (!loaded.insert(name).second) throw Error(path + ": parameter '" + name + "' appears twice");
    staged.emplace_back(it->second, std::move(values));
  }
  for (const auto& [name, tensor] : by_name)
    if (!loaded.count(name)) throw Error(path + ": the model's parameter '" + name + "' is not in the file");
  if (position != file_size)
    throw Error(path + ": " + std::to_string(file_size - position) + " bytes after the last parameter");
  if (!v1) {
    std::uint32_t stored = 0;
    std::memcpy(&stored, bytes.data() + file_size, sizeof stored);
    const std::uint32_t computed = crc32_of(bytes.data(), file_size);
    if (stored != computed) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "CRC-32 0x%08x, expected 0x%08x", computed, stored);
      throw Error(path + ": damaged: " + buf + " (the file changed after it was written)");
    }
  }
  c10::NoGradGuard no_grad;
  for (auto& [param, values] : staged) param.copy_(values);
  return !v1;
}

at::Tensor weighted_cross_entropy(const at::Tensor& logits, const at::Tensor& labels, const at::Tensor& weights,
                                  double denominator) {
  const at::Tensor per_sample = at::cross_entropy_loss(logits.to(at::kFloat), labels, {}, at::Reduction::None);
  return (per_sample * weights).sum() / denominator;
}

}  // namespace ep::exec
