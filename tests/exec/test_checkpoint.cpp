// Training state packs by name and restores bit for bit into a model built
// with another seed; damage, truncation and foreign models are refused by
// name; checkpoints on disk rotate and survive a crashed writer.
#include "tests/exec/pch.hpp"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "exec/checkpoint.hpp"
#include "exec/model.hpp"
#include "exec/optimizer.hpp"
#include "exec/state.hpp"
#include "tests/exec/support.hpp"
#include "tests/traces/damage.hpp"

namespace {

using namespace ep;
namespace fs = std::filesystem;

ModelConfig small_vit(int hidden = 16, int layers = 2) {
  ModelConfig m;
  m.family = ModelFamily::ViT;
  m.num_hidden_layers = layers;
  m.hidden_size = hidden;
  m.intermediate_size = 32;
  m.num_attention_heads = 2;
  m.num_labels = 3;
  m.image_size = 8;
  m.patch_size = 4;
  m.num_channels = 3;
  return m;
}

TrainingConfig training(ep::Optimizer kind) { return exec::testing::update_rule(kind); }

// One optimizer step on random gradients for the parameters in `opt`,
// except `skip` (added, never stepped). Gradients come from `seed`, so two
// runs with the same seed see the same ones.
void step(exec::Model& model, exec::Optimizer& opt, std::uint64_t seed, const std::string& skip = "") {
  at::manual_seed(seed);
  std::vector<exec::NamedTensor> stepped;
  for (auto& p : model.named_params()) {
    at::Tensor t = p.tensor;
    if (!opt.contains(p.name) || p.name == skip) {
      t.mutable_grad().reset();
      continue;
    }
    t.mutable_grad() = at::randn(t.sizes());
    stepped.push_back(p);
  }
  opt.step(stepped, 0.01);
}

// A model and optimizer mid-training: the stem frozen (not in the
// optimizer), head.classifier.bias added but never stepped, the rest
// stepped twice.
struct Trained {
  exec::Model model;
  exec::Optimizer opt;
  Trained(ep::Optimizer kind, std::uint64_t seed) : model(small_vit(), seed), opt(training(kind)) {
    for (const auto& p : model.named_params())
      if (!p.name.starts_with("stem.")) opt.add(p.name);
    step(model, opt, 10, "head.classifier.bias");
    step(model, opt, 11, "head.classifier.bias");
  }
};

void require_same(const exec::Model& a, const exec::Optimizer& oa, const exec::Model& b, const exec::Optimizer& ob) {
  const auto pa = a.named_params(), pb = b.named_params();
  REQUIRE(pa.size() == pb.size());
  for (std::size_t i = 0; i < pa.size(); ++i) {
    INFO(pa[i].name);
    CHECK(at::equal(pa[i].tensor, pb[i].tensor));
  }
  REQUIRE(oa.size() == ob.size());
  for (const auto& [name, s] : oa.state()) {
    INFO(name);
    REQUIRE(ob.contains(name));
    const exec::ParamState& t = ob.state().at(name);
    CHECK(s.step == t.step);
    REQUIRE(s.momentum.defined() == t.momentum.defined());
    REQUIRE(s.second_moment.defined() == t.second_moment.defined());
    if (s.momentum.defined()) CHECK(at::equal(s.momentum, t.momentum));
    if (s.second_moment.defined()) CHECK(at::equal(s.second_moment, t.second_moment));
  }
}

// "scale" needs all 17 digits to round-trip.
const nlohmann::json kMeta = nlohmann::json::parse(R"({"epoch": 3, "iteration": 17, "lr_step": 123456789012,
  "scale": 0.30000000000000004, "frozen": 4, "sampler": "pos", "plans": [{"stages": 2}, {"stages": 3}]})");

std::string temp_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / (name + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

// A bound no test state reaches.
constexpr std::int64_t kAnySize = 1 << 20;

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::string s;
  std::getline(in, s);
  return s;
}

std::vector<std::uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

}  // namespace

TEST_CASE("pack/unpack restores parameters and optimizer state bit for bit into another seed's model",
          "[checkpoint]") {
  for (const ep::Optimizer kind : {ep::Optimizer::SGD, ep::Optimizer::Adam, ep::Optimizer::AdamW}) {
    INFO(to_string(kind));
    Trained a(kind, 1);
    REQUIRE(a.opt.state().at("head.classifier.bias").step == 0);
    REQUIRE(a.opt.state().at("att.0.qkv.weight").step == 2);
    const std::vector<std::uint8_t> bytes = exec::pack_state(a.model, a.opt, kMeta);

    // Another seed, and an optimizer with other members and junk state:
    // all of it is replaced.
    exec::Model b(small_vit(), 2);
    exec::Optimizer ob(training(kind));
    for (const auto& p : b.named_params()) ob.add(p.name);
    step(b, ob, 99);
    CHECK(exec::unpack_state(bytes, b, ob, "state from rank 0") == kMeta);
    require_same(a.model, a.opt, b, ob);
    CHECK_FALSE(ob.contains("stem.patch.weight"));
    CHECK(exec::peek_meta(bytes, "x") == kMeta);

    // Training goes on identically from either.
    step(a.model, a.opt, 12);
    step(b, ob, 12);
    require_same(a.model, a.opt, b, ob);

    // SGD without momentum: members with a step but no tensors survive.
    TrainingConfig plain = training(ep::Optimizer::SGD);
    plain.momentum = 0;
    exec::Optimizer oc(plain), od(plain);
    for (const auto& p : a.model.named_params()) oc.add(p.name);
    step(a.model, oc, 13);
    exec::unpack_state(exec::pack_state(a.model, oc, nlohmann::json::object()), b, od, "x");
    require_same(a.model, oc, b, od);
    CHECK(od.state().at("stem.cls_token").step == 1);
  }
}

TEST_CASE("a damaged state is refused as corrupted, and the model is left untouched", "[checkpoint]") {
  Trained a(ep::Optimizer::Adam, 1);
  const std::vector<std::uint8_t> bytes = exec::pack_state(a.model, a.opt, kMeta);
  exec::Model b(small_vit(), 2);
  exec::Optimizer ob(training(ep::Optimizer::Adam));
  const exec::Model fresh(small_vit(), 2);
  const exec::Optimizer fresh_opt(training(ep::Optimizer::Adam));

  std::vector<std::size_t> offsets;
  for (std::size_t i = 0; i < 300; ++i) offsets.push_back(i);  // header, meta, first records
  for (std::size_t i = 300; i < bytes.size(); i += 509) offsets.push_back(i);
  for (std::size_t i = bytes.size() - 8; i < bytes.size(); ++i) offsets.push_back(i);  // last values, CRC
  for (const std::size_t off : offsets) {
    for (const std::uint8_t flip : {0x01, 0x80}) {
      INFO("offset " << off << " flip " << int(flip));
      std::vector<std::uint8_t> bad = bytes;
      bad[off] ^= flip;
      const auto expected = off < 8 ? Catch::Contains("EPSTATE1") : Catch::Contains("corrupted");
      CHECK_THROWS_WITH(exec::unpack_state(bad, b, ob, "ckpt/state.bin"),
                        Catch::StartsWith("ckpt/state.bin: ") && expected);
      CHECK_THROWS_WITH(exec::peek_meta(bad, "ckpt/state.bin"), expected);
    }
  }
  require_same(fresh, fresh_opt, b, ob);
}

TEST_CASE("a truncated state is refused as truncated", "[checkpoint]") {
  Trained a(ep::Optimizer::SGD, 1);
  const std::vector<std::uint8_t> bytes = exec::pack_state(a.model, a.opt, kMeta);
  exec::Model b(small_vit(), 2);
  exec::Optimizer ob(training(ep::Optimizer::SGD));
  for (const std::size_t size : {std::size_t{0}, std::size_t{5}, std::size_t{8}, std::size_t{31}, std::size_t{60},
                                 bytes.size() / 2, bytes.size() - 5, bytes.size() - 4, bytes.size() - 1}) {
    INFO("size " << size);
    const std::span<const std::uint8_t> cut(bytes.data(), size);
    CHECK_THROWS_WITH(exec::unpack_state(cut, b, ob, "peer"), Catch::StartsWith("peer: ") && Catch::Contains("truncated"));
    CHECK_THROWS_WITH(exec::peek_meta(cut, "peer"), Catch::Contains("truncated"));
  }
}

TEST_CASE("a state for another model, a foreign file or another version is refused by name", "[checkpoint]") {
  Trained a(ep::Optimizer::Adam, 1);
  const std::vector<std::uint8_t> bytes = exec::pack_state(a.model, a.opt, kMeta);
  exec::Optimizer ob(training(ep::Optimizer::Adam));

  exec::Model wider(small_vit(24), 1);
  CHECK_THROWS_WITH(exec::unpack_state(bytes, wider, ob, "state from rank 0"),
                    Catch::StartsWith("state from rank 0: ") && Catch::Contains("'stem.patch.weight'") &&
                        Catch::Contains("expected [24, 3, 4, 4]") && Catch::Contains("found [16, 3, 4, 4]"));
  exec::Model shallower(small_vit(16, 1), 1);
  CHECK_THROWS_WITH(exec::unpack_state(bytes, shallower, ob, "s"),
                    Catch::Contains("unknown parameter 'att.1.qkv.weight'"));
  exec::Model deeper(small_vit(16, 3), 1);
  CHECK_THROWS_WITH(exec::unpack_state(bytes, deeper, ob, "s"),
                    Catch::Contains("missing parameter 'att.2.qkv.weight'"));

  CHECK_THROWS_WITH(exec::peek_meta(bytes_of("EPWEIGHT and more than thirty-two bytes of it"), "f"),
                    Catch::Contains("expected magic EPSTATE1"));
  std::vector<std::uint8_t> v2 = bytes;
  v2[8] = 2;  // version 2, with a valid CRC
  const auto crc = static_cast<std::uint32_t>(crc32(0L, v2.data(), static_cast<uInt>(v2.size() - 4)));
  std::memcpy(v2.data() + v2.size() - 4, &crc, 4);
  CHECK_THROWS_WITH(exec::peek_meta(v2, "f"), Catch::Contains("unsupported state version 2"));
}

TEST_CASE("checkpoints rotate, read the newest, ignore a crashed writer's leftovers", "[checkpoint]") {
  const std::string dir = temp_dir("ep_ckpt_");
  const fs::path root(dir);
  CHECK_THROWS_WITH(exec::read_checkpoint(dir, kAnySize), Catch::Contains(dir));

  const auto a = bytes_of("state A"), b = bytes_of("state B"), c = bytes_of("state C");
  exec::write_checkpoint(dir, 100, a);
  exec::write_checkpoint(dir, 200, b);
  CHECK(fs::exists(root / "step-0000000100" / "state.bin"));
  CHECK(fs::exists(root / "step-0000000200" / "state.bin"));
  CHECK(read_text(root / "latest") == "step-0000000200");
  exec::LoadedCheckpoint got = exec::read_checkpoint(dir, kAnySize);
  CHECK(got.step == 200);
  CHECK(got.state == b);
  CHECK(got.path == (root / "step-0000000200" / "state.bin").string());

  exec::write_checkpoint(dir, 300, c, 2);
  CHECK_FALSE(fs::exists(root / "step-0000000100"));
  CHECK(fs::exists(root / "step-0000000200"));
  got = exec::read_checkpoint(dir, kAnySize);
  CHECK(got.step == 300);
  CHECK(got.state == c);
  // A step dir itself, with or without a trailing slash.
  got = exec::read_checkpoint((root / "step-0000000200").string() + "/", kAnySize);
  CHECK(got.step == 200);
  CHECK(got.state == b);

  // A writer killed mid-way: its .tmp dir, or a step dir renamed before
  // `latest` moved, change nothing for readers.
  fs::create_directories(root / ".tmp-400-999999");
  std::ofstream(root / ".tmp-400-999999" / "state.bin") << "half a st";
  got = exec::read_checkpoint(dir, kAnySize);
  CHECK(got.step == 300);
  CHECK(got.state == c);
  // The next write clears the leftover of an earlier step.
  exec::write_checkpoint(dir, 500, a);
  CHECK_FALSE(fs::exists(root / ".tmp-400-999999"));
  CHECK_FALSE(fs::exists(root / "step-0000000200"));
  // Rewriting a step replaces its state.
  exec::write_checkpoint(dir, 500, b);
  got = exec::read_checkpoint(dir, kAnySize);
  CHECK(got.step == 500);
  CHECK(got.state == b);
  CHECK(fs::exists(root / "step-0000000300"));
  exec::write_checkpoint(dir, 600, c, 1);
  CHECK_FALSE(fs::exists(root / "step-0000000300"));
  CHECK_FALSE(fs::exists(root / "step-0000000500"));
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(root)) ++entries;
  CHECK(entries == 2);  // step-0000000600 and latest

  CHECK_THROWS_WITH(exec::write_checkpoint(dir, 700, c, 0), Catch::Contains("keep"));
  fs::remove(root / "latest");
  CHECK_THROWS_WITH(exec::read_checkpoint(dir, kAnySize), Catch::Contains((root / "latest").string()));
  std::ofstream(root / "latest") << "step-0000000042\n";
  CHECK_THROWS_WITH(exec::read_checkpoint(dir, kAnySize),
                    Catch::Contains((root / "step-0000000042" / "state.bin").string()));
  fs::remove_all(root);
}

TEST_CASE("a packed state survives a checkpoint on disk", "[checkpoint]") {
  const std::string dir = temp_dir("ep_ckpt_state_");
  Trained a(ep::Optimizer::AdamW, 1);
  exec::write_checkpoint(dir, 7, exec::pack_state(a.model, a.opt, kMeta));
  const exec::LoadedCheckpoint got = exec::read_checkpoint(dir, exec::max_state_bytes(a.model));
  CHECK(exec::peek_meta(got.state, got.path) == kMeta);
  exec::Model b(small_vit(), 3);
  exec::Optimizer ob(training(ep::Optimizer::AdamW));
  CHECK(exec::unpack_state(got.state, b, ob, got.path) == kMeta);
  require_same(a.model, a.opt, b, ob);
  fs::remove_all(dir);
}

TEST_CASE("a checkpoint of special files is refused naming the file, a full disk leaves nothing", "[checkpoint]") {
  const std::string dir = temp_dir("ep_ckpt_hostile_");
  const fs::path root(dir);
  const auto a = bytes_of("state A");
  exec::write_checkpoint(dir, 1, a);
  // `latest` a link to /dev/zero: refused, not read until memory runs out.
  fs::remove(root / "latest");
  fs::create_symlink("/dev/zero", root / "latest");
  CHECK_THROWS_WITH(exec::read_checkpoint(dir, kAnySize),
                    Catch::StartsWith((root / "latest").string() + ": a symbolic link to a character device"));
  // A step dir whose state.bin is a directory, a device, or beyond the bound.
  const fs::path step = root / "step-0000000001";
  fs::remove(step / "state.bin");
  fs::create_directory(step / "state.bin");
  CHECK_THROWS_WITH(exec::read_checkpoint(step.string(), kAnySize),
                    Catch::StartsWith((step / "state.bin").string() + ": a directory"));
  fs::remove(step / "state.bin");
  fs::create_symlink("/dev/zero", step / "state.bin");
  CHECK_THROWS_WITH(exec::read_checkpoint(step.string(), kAnySize), Catch::Contains("a character device"));
  fs::remove(step / "state.bin");
  std::ofstream(step / "state.bin") << "too long a state";
  CHECK_THROWS_WITH(exec::read_checkpoint(step.string(), 8),
                    Catch::Contains("16 bytes, expected the checkpoint state of at most 8"));
  fs::remove_all(root);

  // A disk that fills while writing: the error names the file, and neither
  // the temporary dir nor the new step is left; the previous one stays.
  exec::write_checkpoint(dir, 1, a);
  {
    const ep::test::FileSizeLimit full(4096);
    CHECK_THROWS_WITH(exec::write_checkpoint(dir, 2, std::vector<std::uint8_t>(100000, 7)),
                      Catch::Contains("step-0000000002/state.bin: write failed") &&
                          Catch::Contains("(nothing written; the previous checkpoint stays)"));
  }
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(root)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"latest", "step-0000000001"});
  CHECK(exec::read_checkpoint(dir, kAnySize).state == a);
  fs::remove_all(root);
}
