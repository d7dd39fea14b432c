// Config loading: every shipped config loads; each class of bad input gives
// one message naming file:line, the key, what was expected and what was found.
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <regex>
#include <string>

#include "planner/config.hpp"
#include "tests/planner/support.hpp"

namespace {

const std::string kBase = R"([cluster]
nodes = 1
gpus_per_node = 4

[cluster.device]
peak_flops_per_s = 50e9
memory_bytes = 4294967296
memory_bandwidth_bytes_per_s = 10e9

[cluster.intra_node]
bandwidth_bytes_per_s = 5e9
latency_s = 20e-6

[cluster.inter_node]
bandwidth_bytes_per_s = 1e9
latency_s = 50e-6

[cluster.host]
memory_bytes = 2147483648
memory_bandwidth_bytes_per_s = 5e9
disk_bandwidth_bytes_per_s = 500e6

[model]
family = "bert"
num_hidden_layers = 4
hidden_size = 64
intermediate_size = 256
num_attention_heads = 4
seq_length = 32
vocab_size = 1000
num_labels = 2

[data]
name = "synthetic"
num_train_samples = 4096
num_test_samples = 512

[training]
epochs = 3
batch_size = 32
optimizer = "adam"
lr = 1e-3
seed = 7

[planner]
alpha = 0.25
K = 4
)";

// Replace the first occurrence of `from` in the base config.
std::string with(const std::string& from, const std::string& to, std::string text = kBase) {
  const auto pos = text.find(from);
  REQUIRE(pos != std::string::npos);
  return text.replace(pos, from.size(), to);
}

int line_of(const std::string& text, const std::string& needle) {
  const auto pos = text.find(needle);
  REQUIRE(pos != std::string::npos);
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + pos, '\n'));
}

// Parses and returns the error message; fails the test if parsing succeeds.
std::string error_of(const std::string& text, const ep::Overrides& overrides = {}) {
  try {
    (void)ep::parse_config(text, "test.toml", overrides);
  } catch (const ep::Error& e) {
    return e.what();
  }
  FAIL("expected a config error");
  return {};
}

void check_names(const std::string& msg, int line, const std::string& key) {
  INFO(msg);
  CHECK(msg.rfind("test.toml:" + std::to_string(line) + ":", 0) == 0);
  CHECK(msg.find("'" + key + "'") != std::string::npos);
  CHECK(msg.find("expected") != std::string::npos);
  CHECK(msg.find("found") != std::string::npos);
}

}  // namespace

TEST_CASE("the base config loads with documented defaults") {
  const ep::Config c = ep::parse_config(kBase, "test.toml");
  CHECK(c.model.family == ep::ModelFamily::Bert);
  CHECK(c.model.max_position_embeddings == 32);  // defaults to seq_length
  CHECK(c.planner.alpha == 0.25);
  CHECK(c.planner.lambda_frozen == Approx(1.0 / 6));
  CHECK(c.planner.K == 4);
  CHECK(c.planner.chunk_search);
  CHECK(c.training.checkpointing == ep::Checkpointing::ExceptLast);
}

// A config on a Hugging Face checkpoint a bench prepares loads where the
// checkpoint is; on a clean clone it is refused naming the file to prepare.
TEST_CASE("every shipped config loads") {
  const std::filesystem::path root(EP_SOURCE_DIR);
  const std::map<std::string, std::filesystem::path> prepared = {
      {"minilm_wordnet.toml", root / "out" / "finetune" / "minilm" / "config.json"}};
  int count = 0;
  for (const auto& dir : {root / "configs" / "paper", root / "configs" / "small", root / "configs" / "finetune",
                          root / "configs" / "scale", root / "configs" / "gpu"})
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      if (entry.path().extension() != ".toml") continue;
      INFO(entry.path());
      const auto needs = prepared.find(entry.path().filename().string());
      if (needs != prepared.end() && !std::filesystem::exists(needs->second)) {
        CHECK_THROWS_WITH(ep::load_config(entry.path().string()),
                          Catch::Contains("minilm/config.json") && Catch::Contains("cannot open"));
      } else {
        CHECK_NOTHROW(ep::load_config(entry.path().string()));
      }
      ++count;
    }
  CHECK(count >= 6);
}

TEST_CASE("paper configs describe the paper's cluster and workloads") {
  const ep::Config vit = ep::test::paper_config("vit_imagenet");
  CHECK(vit.cluster.nodes == 2);
  CHECK(vit.cluster.gpus_per_node == 8);
  CHECK(vit.cluster.intra_node.bandwidth_bytes_per_s == Approx(15.754e9));
  CHECK(vit.cluster.inter_node.bandwidth_bytes_per_s == Approx(56e9 / 8));
  CHECK(vit.training.batch_size == 400);
  CHECK(vit.training.epochs == 10);
  CHECK(vit.data.num_train_samples == 1281167);
  CHECK(ep::test::paper_config("vit_cifar100").training.batch_size == 320);
  const ep::Config squad = ep::test::paper_config("bert_large_squad");
  CHECK(squad.model.num_hidden_layers == 24);
  CHECK(squad.training.batch_size == 64);
  CHECK(squad.training.epochs == 3);
}

TEST_CASE("TOML syntax errors name file:line") {
  const std::string text = with("alpha = 0.25", "alpha = = 0.25");
  const std::string msg = error_of(text);
  CHECK(msg.rfind("test.toml:" + std::to_string(line_of(text, "alpha = =")) + ":", 0) == 0);
}

TEST_CASE("an unknown key is rejected with its line") {
  const std::string text = with("alpha = 0.25", "alpah = 0.25");
  const std::string msg = error_of(text);
  check_names(msg, line_of(text, "alpah"), "planner.alpah");
  CHECK(msg.find("unknown key (did you mean planner.alpha?)") != std::string::npos);
  // A name no known key is near gets no suggestion.
  const std::string far = error_of(with("alpha = 0.25", "alpha = 0.25\nbanana = 1"));
  CHECK(far.find("planner.banana") != std::string::npos);
  CHECK(far.find("unknown key") != std::string::npos);
  CHECK(far.find("did you mean") == std::string::npos);
}

TEST_CASE("an unknown section is rejected") {
  const std::string text = kBase + "\n[plannr]\nalpha = 0.2\n";
  check_names(error_of(text), line_of(text, "[plannr]"), "plannr");
}

TEST_CASE("an unknown key in a nested table is rejected") {
  const std::string text = with("latency_s = 20e-6", "latency_s = 20e-6\nlatency_ms = 1");
  const std::string msg = error_of(text);
  check_names(msg, line_of(text, "latency_ms"), "cluster.intra_node.latency_ms");
  CHECK(msg.find("did you mean cluster.intra_node.latency_s?") != std::string::npos);
}

TEST_CASE("a wrong type names what was expected and found") {
  const std::string text = with("num_hidden_layers = 4", "num_hidden_layers = \"four\"");
  const std::string msg = error_of(text);
  check_names(msg, line_of(text, "num_hidden_layers"), "model.num_hidden_layers");
  CHECK(msg.find("an integer") != std::string::npos);
  CHECK(msg.find("\"four\"") != std::string::npos);
}

TEST_CASE("a float where an integer belongs is rejected, an integer where a float belongs is accepted") {
  check_names(error_of(with("epochs = 3", "epochs = 3.5")), line_of(kBase, "epochs = 3"), "training.epochs");
  CHECK(ep::parse_config(with("alpha = 0.25", "lambda_frozen = 0"), "test.toml").planner.lambda_frozen == 0);
}

TEST_CASE("out-of-range values are rejected") {
  for (const auto& [from, to, key] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"alpha = 0.25", "alpha = 1.5", "planner.alpha"},
           {"alpha = 0.25", "alpha = 0", "planner.alpha"},
           {"alpha = 0.25", "lambda_frozen = -0.1", "planner.lambda_frozen"},
           {"epochs = 3", "epochs = 0", "training.epochs"},
           {"lr = 1e-3", "lr = -1", "training.lr"},
           {"nodes = 1", "nodes = 0", "cluster.nodes"},
           {"peak_flops_per_s = 50e9", "peak_flops_per_s = 0", "cluster.device.peak_flops_per_s"},
           {"K = 4", "K = 3", "planner.K"},
       }) {
    const std::string text = with(from, to);
    INFO(to);
    check_names(error_of(text), line_of(text, to), key);
  }
}

TEST_CASE("an unknown choice lists the valid ones") {
  const std::string text = with("optimizer = \"adam\"", "optimizer = \"lamb\"");
  const std::string msg = error_of(text);
  check_names(msg, line_of(text, "lamb"), "training.optimizer");
  CHECK(msg.find("sgd|adam|adamw") != std::string::npos);
}

TEST_CASE("inconsistent values are rejected") {
  SECTION("more GPUs asked than a node has") {
    const std::string text = with("K = 4", "K = 8");
    const std::string msg = error_of(text);
    check_names(msg, line_of(text, "K = 8"), "planner.K");
    CHECK(msg.find("gpus_per_node = 4") != std::string::npos);
  }
  SECTION("batch smaller than the micro-batch count") {
    const std::string text = with("K = 4", "K = 4\nchunk_search = false\nM = 64");
    check_names(error_of(text), line_of(text, "batch_size"), "training.batch_size");
  }
  SECTION("batch smaller than the smallest searched micro-batch count") {
    const std::string text = with("batch_size = 32", "batch_size = 2");
    check_names(error_of(text), line_of(text, "batch_size"), "training.batch_size");
  }
  SECTION("heads must divide the hidden size") {
    const std::string text = with("num_attention_heads = 4", "num_attention_heads = 5");
    check_names(error_of(text), line_of(text, "num_attention_heads"), "model.num_attention_heads");
  }
  SECTION("a key of the other model family") {
    const std::string text = with("seq_length = 32", "seq_length = 32\nimage_size = 224");
    check_names(error_of(text), line_of(text, "image_size"), "model.image_size");
  }
  SECTION("virtual stages need a looping schedule") {
    const std::string text = with("K = 4", "K = 4\nvirtual_stages = 2");
    check_names(error_of(text), line_of(text, "virtual_stages"), "planner.virtual_stages");
  }
  SECTION("replay needs a recording") {
    const std::string text = with("K = 4", "K = 4\nfreeze_policy = \"replay\"");
    check_names(error_of(text), line_of(text, "freeze_policy"), "planner.freeze_policy");
  }
  SECTION("replay counts must be non-decreasing and leave layers active") {
    const std::string text = with("K = 4", "K = 4\nfreeze_policy = \"replay\"\nreplay_frozen = [1, 3, 2]");
    check_names(error_of(text), line_of(text, "replay_frozen"), "planner.replay_frozen");
  }
  SECTION("a fixed M together with chunk search") {
    const std::string text = with("K = 4", "K = 4\nM = 8");
    check_names(error_of(text), line_of(text, "M = 8"), "planner.M");
  }
}

TEST_CASE("a cluster preset fills the node type, the file's keys override it, the node count stays required") {
  // The whole [cluster] of the base config replaced by a preset and two keys.
  const std::string model = kBase.substr(kBase.find("[model]"));
  const std::string text = "[cluster]\npreset = \"dgx_h100\"\nnodes = 4\n\n[cluster.inter_node]\n"
                           "bandwidth_bytes_per_s = 100e9\n\n" + model;
  const ep::Config c = ep::parse_config(text, "test.toml");
  CHECK(c.cluster.preset == "dgx_h100");
  CHECK(c.cluster.nodes == 4);
  CHECK(c.cluster.gpus_per_node == 8);
  CHECK(c.cluster.device.peak_flops_per_s == 989e12);
  CHECK(c.cluster.intra_node.bandwidth_bytes_per_s == 450e9);
  CHECK(c.cluster.inter_node.bandwidth_bytes_per_s == 100e9);  // the file's
  CHECK(c.cluster.inter_node.latency_s == 5e-6);              // the preset's
  CHECK(c.cluster.gpu_host_link_bandwidth() == 64e9);          // each GPU's PCIe 5.0 x16, not NVLink
  // Without a preset or the key, a GPU reaches host memory as it reaches
  // the other GPUs; with the key, at its rate.
  const ep::Config base = ep::parse_config(kBase, "test.toml");
  CHECK(base.cluster.gpu_host_link_bandwidth() == base.cluster.intra_node.bandwidth_bytes_per_s);
  const ep::Config own = ep::parse_config(with("disk_bandwidth_bytes_per_s = 500e6",
                                               "disk_bandwidth_bytes_per_s = 500e6\ngpu_link_bandwidth_bytes_per_s = 3e9"),
                                          "test.toml");
  CHECK(own.cluster.gpu_host_link_bandwidth() == 3e9);
  // Every preset is a whole node the loader accepts, and the paper's is the
  // paper configs' cluster.
  for (const char* name : {"paper", "dgx_a100", "dgx_h100"}) {
    CAPTURE(name);
    const ep::Config p = ep::parse_config(with("nodes = 1", std::string("preset = \"") + name + "\"\nnodes = 2",
                                               "[cluster]\nnodes = 1\n\n" + model),
                                          "test.toml");
    CHECK(p.cluster.gpus_per_node == 8);
  }
  const ep::Config paper = ep::test::paper_config("vit_imagenet");
  CHECK(paper.cluster.preset == "paper");
  CHECK(paper.cluster.device.peak_flops_per_s == 11.2e12);
  CHECK(paper.cluster.host.memory_bandwidth_bytes_per_s == 12e9);
  // An unknown preset lists the known ones; without nodes the preset is not enough.
  const std::string unknown = "[cluster]\npreset = \"dgx_b200\"\nnodes = 4\n\n" + model;
  const std::string msg = error_of(unknown);
  check_names(msg, 2, "cluster.preset");
  CHECK(msg.find("one of dgx_a100|dgx_h100|paper") != std::string::npos);
  const std::string no_nodes = "[cluster]\npreset = \"dgx_a100\"\n\n" + model;
  CHECK(error_of(no_nodes).find("'cluster.nodes'") != std::string::npos);
}

TEST_CASE("[cluster.topology] reads the leaf switches and refuses what cannot be") {
  const ep::Config flat = ep::parse_config(kBase, "test.toml");
  CHECK(flat.cluster.topology.flat(flat.cluster.nodes));
  const std::string tree = with("[cluster.device]", "[cluster.topology]\nnodes_per_switch = 2\noversubscription = 4\n"
                                                    "uplink_latency_s = 1e-6\n\n[cluster.device]");
  const ep::Config c = ep::parse_config(tree, "test.toml", {"cluster.nodes=6"});
  CHECK(c.cluster.topology.nodes_per_switch == 2);
  CHECK(c.cluster.topology.oversubscription == 4);
  CHECK(c.cluster.topology.uplink_latency_s == 1e-6);
  CHECK_FALSE(c.cluster.topology.flat(6));
  CHECK(c.cluster.topology.flat(2));
  check_names(error_of(with("oversubscription = 4", "oversubscription = 0.5", tree)), line_of(tree, "oversubscription"),
              "cluster.topology.oversubscription");
  check_names(error_of(with("uplink_latency_s = 1e-6", "uplink_latency_s = 1e-12", tree)),
              line_of(tree, "uplink_latency_s"), "cluster.topology.uplink_latency_s");
  check_names(error_of(with("nodes_per_switch = 2", "nodes_per_switch = -1", tree)), line_of(tree, "nodes_per_switch"),
              "cluster.topology.nodes_per_switch");
  const std::string unknown = with("nodes_per_switch = 2", "spine = 1", tree);
  check_names(error_of(unknown), line_of(unknown, "spine"), "cluster.topology.spine");
}

TEST_CASE("a missing required key points at its section") {
  const std::string text = with("hidden_size = 64\n", "");
  const std::string msg = error_of(text);
  check_names(msg, line_of(text, "[model]"), "model.hidden_size");
  CHECK(msg.find("required") != std::string::npos);
}

TEST_CASE("a missing section is named") {
  const std::string text = with("[data]\nname = \"synthetic\"\nnum_train_samples = 4096\nnum_test_samples = 512\n", "");
  const std::string msg = error_of(text);
  CHECK(msg.find("'data'") != std::string::npos);
}

TEST_CASE("overrides (--set) reach any key, typed, and name themselves in errors") {
  const ep::Config c = ep::parse_config(kBase, "test.toml",
                                        {"planner.alpha=0.5", "planner.partitioner=optimal",
                                         "training.epochs=7", "cluster.device.efficiency=0.3"});
  CHECK(c.planner.alpha == 0.5);
  CHECK(c.planner.partitioner == ep::PartitionerKind::Optimal);
  CHECK(c.training.epochs == 7);
  CHECK(c.cluster.device.efficiency == 0.3);

  std::string msg = error_of(kBase, {"planner.alpha=2"});
  CHECK(msg.rfind("--set planner.alpha: key 'planner.alpha'", 0) == 0);
  msg = error_of(kBase, {"planner.alpah=0.2"});
  CHECK(msg.find("planner.alpah") != std::string::npos);
  CHECK(msg.find("unknown key") != std::string::npos);
  msg = error_of(kBase, {"training.epochs=many"});
  CHECK(msg.find("\"many\"") != std::string::npos);
  msg = error_of(kBase, {"alpha"});
  CHECK(msg.find("KEY=VALUE") != std::string::npos);
  msg = error_of(kBase, {"training.epochs.x=1"});
  CHECK(msg.find("not a table") != std::string::npos);
}

TEST_CASE("a missing file is a clear error") {
  try {
    (void)ep::load_config("/nonexistent/config.toml");
    FAIL("expected an error");
  } catch (const ep::Error& e) {
    CHECK(std::string(e.what()).find("/nonexistent/config.toml") != std::string::npos);
  }
}

TEST_CASE("enum names round-trip through to_string") {
  for (const char* name : {"gpipe", "1f1b", "looping_bf", "looping_df"}) {
    const ep::Config c = ep::parse_config(kBase, "t", {std::string("planner.schedule=") + name});
    CHECK(ep::to_string(c.planner.schedule) == name);
  }
  for (const char* name : {"none", "paper", "memory"}) {
    const ep::Config c = ep::parse_config(kBase, "t", {std::string("planner.compression=") + name});
    CHECK(ep::to_string(c.planner.compression) == name);
  }
  for (const char* name : {"per_pipeline", "lr_scaled", "global"}) {
    const ep::Config c = ep::parse_config(kBase, "t", {std::string("training.batch_policy=") + name});
    CHECK(ep::to_string(c.training.batch_policy) == name);
  }
  CHECK_THAT(error_of(kBase, {"training.batch_policy=fixed"}), Catch::Contains("per_pipeline|lr_scaled|global"));
}

TEST_CASE("integers are read as written, 64 bits, and refused when they do not fit") {
  // 4294967298 is 2 mod 2^32: it must not become 2 epochs.
  for (const auto& [from, to, key, found] : std::vector<std::tuple<std::string, std::string, std::string, std::string>>{
           {"epochs = 3", "epochs = 4294967298", "training.epochs", "found 4294967298"},
           {"num_hidden_layers = 4", "num_hidden_layers = 4294967300", "model.num_hidden_layers", "found 4294967300"},
           {"batch_size = 32", "batch_size = 1000000000000000000", "training.batch_size", "found 1000000000000000000"},
           {"num_train_samples = 4096", "num_train_samples = 9223372036854775807", "data.num_train_samples",
            "found 9223372036854775807"},
           {"nodes = 1", "nodes = -4294967295", "cluster.nodes", "found -4294967295"},
           {"seq_length = 32", "seq_length = 2147483648", "model.seq_length", "found 2147483648"},
       }) {
    const std::string text = with(from, to);
    const std::string msg = error_of(text);
    INFO(msg);
    check_names(msg, line_of(text, to), key);
    CHECK(msg.find(found) != std::string::npos);
  }
  // The upper bounds say why.
  const std::string msg = error_of(with("num_train_samples = 4096", "num_train_samples = 9223372036854775807"));
  CHECK(msg.find("expected an integer <= 1000000000000 (a trillion samples") != std::string::npos);
  CHECK(error_of(with("epochs = 3", "epochs = 4294967298")).find("<= 10000 (passes over the data; the longest published trainings run a few thousand)") !=
        std::string::npos);
}

TEST_CASE("counts whose products would overflow are bounded at load") {
  // A cluster of 2^21 devices, a ViT whose token count overflows 32 bits.
  std::string text = with("nodes = 1\ngpus_per_node = 4", "nodes = 8192\ngpus_per_node = 256");
  std::string msg = error_of(text);
  check_names(msg, line_of(text, "nodes = 8192"), "cluster.nodes");
  CHECK(msg.find("nodes x gpus_per_node <= 8192") != std::string::npos);
  text = with("family = \"bert\"", "family = \"vit\"");
  text = with("seq_length = 32\nvocab_size = 1000\n", "image_size = 65536\npatch_size = 1\n", text);
  msg = error_of(text);
  check_names(msg, line_of(text, "image_size"), "model.image_size");
  CHECK(msg.find("4294967297 tokens") != std::string::npos);
}

TEST_CASE("a float key must be finite: inf and nan are refused by name") {
  for (const auto& [from, to, key] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"lr = 1e-3", "lr = inf", "training.lr"},
           {"lr = 1e-3", "lr = nan", "training.lr"},
           {"alpha = 0.25", "alpha = -inf", "planner.alpha"},
           {"bandwidth_bytes_per_s = 5e9", "bandwidth_bytes_per_s = inf", "cluster.intra_node.bandwidth_bytes_per_s"},
           {"latency_s = 20e-6", "latency_s = nan", "cluster.intra_node.latency_s"},
           {"memory_bytes = 4294967296", "memory_bytes = +inf", "cluster.device.memory_bytes"},
       }) {
    const std::string text = with(from, to);
    const std::string msg = error_of(text);
    INFO(msg);
    check_names(msg, line_of(text, to), key);
    CHECK(msg.find("a finite number") != std::string::npos);
  }
  CHECK(error_of(kBase, {"training.lr=inf"}).rfind("--set training.lr: key 'training.lr': expected a finite number", 0) ==
        0);
}

TEST_CASE("physical quantities are checked against physical ranges at load") {
  for (const auto& [from, to, key, range] :
       std::vector<std::tuple<std::string, std::string, std::string, std::string>>{
           // SimGrid deadlocks on the first, aborts on the second.
           {"bandwidth_bytes_per_s = 5e9", "bandwidth_bytes_per_s = 1e-300", "cluster.intra_node.bandwidth_bytes_per_s",
            "[1000, 1e+15]"},
           {"latency_s = 20e-6", "latency_s = 1e18", "cluster.intra_node.latency_s", "[0, 10]"},
           {"latency_s = 50e-6", "latency_s = -1e-6", "cluster.inter_node.latency_s", "[0, 10]"},
           {"peak_flops_per_s = 50e9", "peak_flops_per_s = 1e30", "cluster.device.peak_flops_per_s", "[1e+06, 1e+18]"},
           {"memory_bytes = 4294967296", "memory_bytes = 1", "cluster.device.memory_bytes", "[1e+06, 1e+15]"},
           {"memory_bandwidth_bytes_per_s = 10e9", "memory_bandwidth_bytes_per_s = 1e20",
            "cluster.device.memory_bandwidth_bytes_per_s", "[1000, 1e+15]"},
           {"memory_bytes = 2147483648", "memory_bytes = 1e30", "cluster.host.memory_bytes", "[0, 1e+16]"},
           {"disk_bandwidth_bytes_per_s = 500e6", "disk_bandwidth_bytes_per_s = 0",
            "cluster.host.disk_bandwidth_bytes_per_s", "[1000, 1e+15]"},
           {"memory_bandwidth_bytes_per_s = 5e9",
            "gpu_link_bandwidth_bytes_per_s = 0\nmemory_bandwidth_bytes_per_s = 5e9",
            "cluster.host.gpu_link_bandwidth_bytes_per_s", "[1000, 1e+15]"},
       }) {
    const std::string text = with(from, to);
    const std::string msg = error_of(text);
    INFO(msg);
    check_names(msg, line_of(text, to), key);
    CHECK(msg.find("expected a number in " + range) != std::string::npos);
  }
  // Keys with defaults too.
  std::string msg = error_of(kBase + "\n[cluster.transition]\ngroup_setup_s = 1e12\n");
  CHECK(msg.find("key 'cluster.transition.group_setup_s': expected a number in [0, 100000]") != std::string::npos);
  msg = error_of(kBase + "\n[cluster.transition]\ngroup_per_rank_s = 11\n");
  CHECK(msg.find("key 'cluster.transition.group_per_rank_s': expected a number in [0, 10]") != std::string::npos);
  // The constants the formulas replaced name what replaced them.
  msg = error_of(kBase + "\n[cluster.transition]\nddp_rebuild_s = 1\n");
  CHECK(msg.find("key 'cluster.transition.ddp_rebuild_s': expected cluster.transition.group_setup_s and "
                 "group_per_rank_s") != std::string::npos);
  msg = error_of(kBase + "\n[cluster.transition]\npipeline_warmup_s = 1\n");
  CHECK(msg.find("expected cluster.transition.warmup_iterations") != std::string::npos);
  msg = error_of(kBase, {"planner.bucket_size_bytes=1"});
  CHECK(msg.find("smaller buckets multiply the all-reduces") != std::string::npos);
}

TEST_CASE("a --set value is one value: a line break in it is refused, not dropped") {
  std::string msg = error_of(kBase, {"training.epochs=3\nplanner.alpha=0.9"});
  CHECK(msg.find("--set training.epochs") != std::string::npos);
  CHECK(msg.find("line break") != std::string::npos);
  msg = error_of(kBase, {"training.epochs=3\r"});
  CHECK(msg.find("line break") != std::string::npos);
}

TEST_CASE("errors in a value that --set gave are blamed on the flag, not the file") {
  // An inline table from --set: its keys' errors name the flag, never the
  // config file's line 1.
  std::string msg = error_of(kBase, {"cluster.intra_node={bandwidth_bytes_per_s = 0, latency_s = 1e-6}"});
  INFO(msg);
  CHECK(msg.rfind("--set cluster.intra_node: key 'cluster.intra_node.bandwidth_bytes_per_s'", 0) == 0);
  msg = error_of(kBase, {"cluster.intra_node={bandwidth_bytes_per_s = 5e9, latency_s = 1e-6, latncy = 1}"});
  CHECK(msg.rfind("--set cluster.intra_node: key 'cluster.intra_node.latncy'", 0) == 0);
  msg = error_of(kBase, {"cluster.intra_node={latency_s = 1e-6}"});  // a required key missing from it
  CHECK(msg.rfind("--set cluster.intra_node: key 'cluster.intra_node.bandwidth_bytes_per_s'", 0) == 0);
}

TEST_CASE("schedule kind names round-trip, and nothing else parses") {
  for (const ep::ScheduleKind k : {ep::ScheduleKind::GPipe, ep::ScheduleKind::OneFOneB, ep::ScheduleKind::LoopingBreadthFirst,
                               ep::ScheduleKind::LoopingDepthFirst})
    CHECK(ep::parse_schedule_kind(ep::to_string(k)) == k);
  for (const char* bad : {"", "GPipe", "looping", "zigzag", "gpipe "}) CHECK_FALSE(ep::parse_schedule_kind(bad).has_value());
}

TEST_CASE("initial weights: a path relative to the config file, kept prefixes need a file to keep from") {
  std::string text = kBase;
  text.replace(text.find("seed = 7\n"), 9, "seed = 7\ninit_weights = \"pre/weights.bin\"\n");
  CHECK(ep::parse_config(text, "runs/a/c.toml", {}).training.init_weights == "runs/a/pre/weights.bin");
  const ep::Config plain = ep::parse_config(kBase, "c.toml", {});
  CHECK(plain.training.init_weights.empty());
  CHECK(plain.training.init_keep.empty());
  const ep::Config c =
      ep::parse_config(kBase, "runs/a/c.toml", {"training.init_weights=\"pre/w.bin\"", "training.init_keep=[\"head.\"]"});
  CHECK(c.training.init_weights == "pre/w.bin");  // from --set: relative to the working directory
  CHECK(c.training.init_keep == std::vector<std::string>{"head."});
  std::string msg = error_of(kBase, {"training.init_keep=[\"head.\"]"});
  CHECK_THAT(msg, Catch::Contains("key 'training.init_keep'") && Catch::Contains("init_weights"));
  msg = error_of(kBase, {"training.init_weights=\"w.bin\"", "training.init_keep=[\"\"]"});
  CHECK_THAT(msg, Catch::Contains("non-empty strings"));
  msg = error_of(kBase, {"training.init_weights=\"w.bin\"", "training.init_keep=\"head.\""});
  CHECK_THAT(msg, Catch::Contains("an array of strings"));
}

TEST_CASE("a class subset is distinct fashion-mnist ids, one label each, whatever the command", "[dataset]") {
  // Checked at load: plan and simulate refuse what train would.
  const std::string fmnist = ep::test::repo_path("configs/small/tiny_vit_fmnist.toml");
  const auto load = [&](ep::Overrides o) { return ep::load_config(fmnist, o); };
  const auto refused = [&](ep::Overrides o) { return ep::test::error_of([&] { (void)load(o); }); };
  CHECK(load({"data.classes=[5, 7, 6]", "model.num_labels=3", "data.num_train_samples=18000",
              "data.num_test_samples=3000"})
            .data.classes == std::vector<int>{5, 7, 6});
  std::string msg = refused({"data.classes=[1, 2, 1]", "model.num_labels=3"});
  CHECK_THAT(msg, Catch::Contains("key 'data.classes'") && Catch::Contains("distinct") && Catch::Contains("1 twice"));
  msg = refused({"data.classes=[-1]"});
  CHECK_THAT(msg, Catch::Contains("key 'data.classes'") && Catch::Contains(">= 0"));
  msg = refused({"data.classes=\"0-4\""});
  CHECK_THAT(msg, Catch::Contains("an array of integers"));
  msg = refused({"data.classes=[10]", "model.num_labels=1"});
  CHECK_THAT(msg,
             Catch::StartsWith("--set data.classes: key 'data.classes': expected fashion-mnist classes in [0, 10)"));
  msg = refused({"data.classes=[1, 2]"});
  CHECK_THAT(msg, Catch::Contains("key 'model.num_labels': expected 2 for fashion-mnist with these data.classes, "
                                  "found 10"));
  msg = refused({"data.num_train_samples=60001"});
  CHECK_THAT(msg, Catch::Contains("key 'data.num_train_samples': expected at most 60000"));
  msg = refused(
      {"data.classes=[3]", "model.num_labels=1", "data.num_train_samples=6000", "data.num_test_samples=1001"});
  CHECK_THAT(msg, Catch::Contains("key 'data.num_test_samples': expected at most 1000"));
  msg = refused({"model.num_channels=3"});
  CHECK_THAT(msg, Catch::Contains("key 'model.num_channels'"));
  // Other data sets have no class subset; token data need BERT.
  CHECK_THAT(error_of(kBase, {"data.classes=[5]"}), Catch::Contains("only fashion-mnist has one"));
  CHECK_THAT(error_of(kBase, {"data.name=\"synthetic-images\""}), Catch::Contains("key 'data.name'"));
}

TEST_CASE("data.augment: distinct image transforms for ViT only, and planner.cache = \"on\" beside it refused") {
  const std::string fmnist = ep::test::repo_path("configs/small/tiny_vit_fmnist.toml");
  const auto load = [&](ep::Overrides o) { return ep::load_config(fmnist, o); };
  const auto refused = [&](ep::Overrides o) { return ep::test::error_of([&] { (void)load(o); }); };
  CHECK(load({}).data.augment.empty());
  CHECK(load({"data.augment=[\"crop\", \"hflip\"]"}).data.augment ==
        std::vector<ep::Augmentation>{ep::Augmentation::Crop, ep::Augmentation::HorizontalFlip});
  CHECK(load({"data.augment=[\"hflip\"]", "planner.cache=\"auto\""}).planner.cache == ep::CachePolicyKind::Auto);
  std::string msg = refused({"data.augment=[\"rotate\"]"});
  CHECK_THAT(msg, Catch::Contains("key 'data.augment'") && Catch::Contains("hflip|crop") &&
                      Catch::Contains("found \"rotate\""));
  msg = refused({"data.augment=[\"crop\", \"crop\"]"});
  CHECK_THAT(msg, Catch::Contains("key 'data.augment'") && Catch::Contains("\"crop\" twice"));
  msg = refused({"data.augment=\"crop\""});
  CHECK_THAT(msg, Catch::Contains("key 'data.augment'") && Catch::Contains("an array of strings"));
  msg = refused({"data.augment=[\"hflip\"]", "planner.cache=\"on\""});
  CHECK_THAT(msg, Catch::Contains("key 'planner.cache'") && Catch::Contains("stale") && Catch::Contains("found \"on\""));
  CHECK_THAT(error_of(kBase, {"data.augment=[\"hflip\"]"}),
             Catch::Contains("key 'data.augment'") && Catch::Contains("\"bert\" (images only)"));
}

TEST_CASE("a key given twice by --set is refused, naming it") {
  CHECK_THAT(error_of(kBase, {"planner.alpha=0.2", "planner.alpha=0.3"}),
             Catch::StartsWith("--set planner.alpha: given twice"));
  CHECK_THAT(error_of(kBase, {"cluster.device.efficiency=0.3", "cluster.device={peak_flops_per_s=1e12}"}),
             Catch::StartsWith("--set cluster.device: overlaps --set cluster.device.efficiency"));
}
