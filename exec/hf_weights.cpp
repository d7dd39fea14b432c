#include "exec/hf_weights.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <bit>
#include <map>
#include <optional>
#include <ostream>

#include "exec/model.hpp"
#include "planner/error.hpp"
#include "planner/hf_model.hpp"
#include "planner/input_file.hpp"
#include "planner/safetensors.hpp"

namespace ep::exec {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian, as this host");

std::string shape_text(at::IntArrayRef shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// The floating dtypes a weight may be stored in.
std::optional<at::ScalarType> float_dtype(const std::string& dtype) {
  if (dtype == "F32") return at::kFloat;
  if (dtype == "F16") return at::kHalf;
  if (dtype == "BF16") return at::kBFloat16;
  if (dtype == "F64") return at::kDouble;
  return std::nullopt;
}

// Where one checkpoint tensor goes: rows [row, row + rows) of a parameter.
struct Target {
  at::Tensor param;
  std::int64_t row = 0, rows = 0;
  std::vector<std::int64_t> shape;  // what the tensor must have
};

bool kept(const std::string& name, const std::vector<std::string>& keep) {
  return std::any_of(keep.begin(), keep.end(), [&](const std::string& k) { return name.rfind(k, 0) == 0; });
}

}  // namespace

HfLoaded load_hf_weights(Model& model, const std::string& dir, const std::vector<std::string>& keep) {
  const HfConfig hf = read_hf_config(dir);
  const HfLayout layout = hf_layout(model.spec().config, hf.architecture);
  const std::string path = hf_weights_path(dir);
  const SafetensorsHeader header = read_safetensors_header(path);
  model.check_keep(keep);

  HfLoaded loaded;
  loaded.architecture = hf.architecture;
  std::map<std::string, at::Tensor> params;
  for (const NamedTensor& p : model.named_params()) params.emplace(p.name, p.tensor);
  std::map<std::string, Target> targets;  // checkpoint name -> where it goes
  std::map<std::string, std::string> skipped;  // checkpoint name -> why its values are not used
  for (const std::string& name : layout.unused) skipped.emplace(name, "unused");
  for (const HfParam& p : layout.params) {
    const at::Tensor& param = params.at(p.ours);
    if (p.sources.empty() || kept(p.ours, keep)) {
      loaded.seeded.push_back(p.ours);
      for (const HfSource& s : p.sources) skipped.emplace(s.name, "kept");
      continue;
    }
    std::int64_t row = 0;
    for (const HfSource& s : p.sources) {
      std::vector<std::int64_t> shape = param.sizes().vec();
      if (s.rows > 0) shape[0] = s.rows;
      targets.emplace(s.name, Target{param, row, shape[0], shape});
      row += shape[0];
    }
  }
  // Every tensor checked before any value is read: one that the
  // architecture does not have, of a dtype or shape it does not have, or
  // missing, is refused naming it.
  for (const SafetensorsEntry& t : header.tensors) {
    const std::string where = path + ": tensor '" + printable(t.name) + "'";
    if (skipped.count(t.name)) continue;
    const auto it = targets.find(t.name);
    if (it == targets.end())
      throw Error(where + ": expected none (" + hf.architecture + " has no such tensor), found " + t.dtype + " " +
                  shape_text(t.shape));
    if (!float_dtype(t.dtype)) throw Error(where + ": expected dtype F32, F16, BF16 or F64, found " + t.dtype);
    if (t.shape != it->second.shape) {
      const bool head = t.name.rfind("classifier.", 0) == 0;
      throw Error(where + ": expected shape " + shape_text(it->second.shape) +
                  (head ? " (model.num_labels; or keep a new classifier: training.init_keep = [\"head.classifier.\"])"
                        : " (the checkpoint's config.json)") +
                  ", found " + shape_text(t.shape));
    }
  }
  for (const auto& [name, target] : targets)
    if (!header.find(name))
      throw Error(path + ": tensor '" + name + "': expected F32 " + shape_text(target.shape) + " (" + hf.architecture +
                  " has it), found none");

  // Read in the data's order, one tensor at a time.
  constexpr InputFormat kFormat{"safetensors file", std::int64_t{1} << 40, "a checkpoint of at most 1 TiB"};
  InputFile in(path, kFormat);
  std::vector<char> skip(1 << 20);
  const auto discard = [&](std::uint64_t n) {
    for (; n > 0; n -= std::min<std::uint64_t>(n, skip.size()))
      in.read_exactly(skip.data(), std::min<std::uint64_t>(n, skip.size()));
  };
  discard(header.data_start);
  c10::NoGradGuard no_grad;
  for (const SafetensorsEntry& t : header.tensors) {
    const auto it = targets.find(t.name);
    if (it == targets.end()) {
      if (skipped.at(t.name) == "unused") loaded.unused.push_back(t.name);
      discard(t.end - t.begin);
      continue;
    }
    at::Tensor values = at::empty(t.shape, *float_dtype(t.dtype));
    in.read_exactly(values.data_ptr(), t.end - t.begin);
    const Target& target = it->second;
    target.param.narrow(0, target.row, target.rows).copy_(values.to(at::kFloat));
  }
  return loaded;
}

void write_hf_weights(const Model& model, std::ostream& out, const std::string& path) {
  const ModelConfig& m = model.spec().config;
  const HfLayout layout = hf_layout(m, hf_classifier_architecture(m.family));
  std::map<std::string, at::Tensor> params;
  for (const NamedTensor& p : model.named_params()) params.emplace(p.name, p.tensor);
  std::vector<SafetensorsEntry> entries;
  std::vector<at::Tensor> data;
  std::uint64_t at = 0;
  for (const HfParam& p : layout.params) {
    const at::Tensor all = params.at(p.ours).detach().to(at::kCPU, at::kFloat).contiguous();
    std::int64_t row = 0;
    for (const HfSource& s : p.sources) {
      const std::int64_t rows = s.rows > 0 ? s.rows : all.size(0);
      const at::Tensor part = all.narrow(0, row, rows).contiguous();
      row += rows;
      const auto bytes = static_cast<std::uint64_t>(part.numel()) * sizeof(float);
      entries.push_back({s.name, "F32", part.sizes().vec(), at, at + bytes});
      data.push_back(part);
      at += bytes;
    }
  }
  out << safetensors_header_bytes(entries, {{"format", "pt"}});
  for (const at::Tensor& t : data)
    out.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.numel() * sizeof(float)));
  if (!out) throw Error(path + ": write failed");
}

Dropout checkpoint_dropout(const std::string& dir) {
  if (dir.empty()) return {};
  const HfConfig hf = read_hf_config(dir);
  return {hf.hidden_dropout, hf.attention_dropout, hf.classifier_dropout};
}

}  // namespace ep::exec
