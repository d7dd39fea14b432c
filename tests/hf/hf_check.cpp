// The executor's side of the Hugging Face tests (hf_checkpoints.py drives
// it against transformers):
//   hf_check logits CONFIG INPUT OUT [--lengths FILE] [--save DIR]
//     the model CONFIG describes, from its model.checkpoint's weights, on
//     INPUT (raw float32 pixels [B, C, H, W] or int64 token ids [B, S]; B
//     from the file's size; --lengths: int64 [B] real tokens per sample):
//     its logits to OUT (raw float32 [B, labels]); --save writes the model
//     as a checkpoint (config.json, model.safetensors) in DIR, as train does.
//   hf_check data FILE
//     a prepared data set's split (exec/prepared_data.hpp) summarised as JSON.
// Bad input is one ERROR line and exit 2, as elasticpipe's.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "exec/hf_weights.hpp"
#include "exec/model.hpp"
#include "exec/prepared_data.hpp"
#include "planner/config.hpp"
#include "planner/hf_model.hpp"
#include "planner/input_file.hpp"

namespace {

using namespace ep;

at::Tensor read_raw(const std::string& path, at::ScalarType type, std::vector<std::int64_t> rest) {
  const std::string bytes = read_input_file(path, {"raw tensor", std::int64_t{1} << 30, "a test input"});
  std::int64_t per = static_cast<std::int64_t>(c10::elementSize(type));
  for (const std::int64_t d : rest) per *= d;
  if (bytes.empty() || bytes.size() % per != 0)
    throw Error(path + ": expected a multiple of " + std::to_string(per) + " bytes, found " + std::to_string(bytes.size()));
  rest.insert(rest.begin(), static_cast<std::int64_t>(bytes.size()) / per);
  at::Tensor t = at::empty(rest, type);
  std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

int logits(const std::vector<std::string>& args) {
  if (args.size() < 3) throw Error("usage: hf_check logits CONFIG INPUT OUT [--lengths FILE] [--save DIR]");
  std::string lengths_path, save;
  for (std::size_t i = 3; i + 1 < args.size(); i += 2)
    (args[i] == "--lengths" ? lengths_path : args[i] == "--save" ? save : throw Error("unknown " + args[i])) = args[i + 1];
  const Config c = load_config(args[0]);
  const ModelConfig& m = c.model;
  exec::Model model(m, c.training.seed);
  if (!m.checkpoint.empty()) exec::load_hf_weights(model, m.checkpoint, c.training.init_keep);
  const bool vit = m.family == ModelFamily::ViT;
  const at::Tensor x = vit ? read_raw(args[1], at::kFloat, {m.num_channels, m.image_size, m.image_size})
                           : read_raw(args[1], at::kLong, {m.seq_length});
  const at::Tensor lengths = lengths_path.empty() ? at::Tensor() : read_raw(lengths_path, at::kLong, {});
  c10::NoGradGuard no_grad;
  const at::Tensor out = model.forward({0, model.num_sublayers()}, x, lengths).contiguous();
  std::ofstream(args[2], std::ios::binary)
      .write(static_cast<const char*>(out.data_ptr()), static_cast<std::streamsize>(out.numel() * sizeof(float)));
  if (!save.empty()) {
    std::filesystem::create_directories(save);
    const std::string source = m.checkpoint.empty() ? "" : read_hf_config(m.checkpoint).text;
    std::ofstream(std::filesystem::path(save) / "config.json") << hf_config_json(m, source, {});
    std::ofstream weights(std::filesystem::path(save) / "model.safetensors", std::ios::binary);
    exec::write_hf_weights(model, weights, save + "/model.safetensors");
  }
  return 0;
}

int data(const std::vector<std::string>& args) {
  if (args.size() != 1) throw Error("usage: hf_check data FILE");
  const exec::Dataset d = exec::load_prepared(args[0], 0, 0);
  nlohmann::json j{{"size", d.size}, {"num_classes", d.num_classes}, {"class_names", d.class_names},
                   {"labels", d.labels}, {"lengths", d.lengths}, {"seq_length", d.seq_length},
                   {"channels", d.channels}, {"height", d.height}, {"width", d.width},
                   {"channel_mean", d.channel_mean}, {"channel_std", d.channel_std}};
  std::int64_t sum = 0;
  for (const std::int64_t t : d.tokens) sum += t;
  for (const std::uint8_t b : d.image_bytes) sum += b;
  j["sum"] = sum;
  std::cout << j.dump() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + std::min(argc, 2), argv + argc);
  try {
    const std::string command = argc > 1 ? argv[1] : "";
    if (command == "logits") return logits(args);
    if (command == "data") return data(args);
    throw Error("usage: hf_check logits|data ...");
  } catch (const std::exception& e) {
    std::cerr << "ERROR: " << e.what() << "\n";
    return 2;
  }
}
