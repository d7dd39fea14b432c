// Config loading: strict (the set of keys must equal the set of known
// fields), typed, range- and consistency-checked, every message naming
// file:line, the key, what was expected and what was found.
#include "planner/config.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>
#include <set>
#include <sstream>

#include "planner/cluster_presets.hpp"
#include "planner/config_overrides.hpp"
#include "planner/config_reader.hpp"
#include "planner/datasets.hpp"
#include "planner/freeze.hpp"
#include "planner/hf_model.hpp"
#include "planner/input_file.hpp"

namespace ep {
namespace {

using namespace config_reader;

// One table per enum, used for parsing and printing alike.
constexpr EnumName<ModelFamily> kFamilies[] = {{ModelFamily::ViT, "vit"},
                                               {ModelFamily::Bert, "bert"}};
constexpr EnumName<Activation> kActivations[] = {{Activation::Gelu, "gelu"}, {Activation::GeluTanh, "gelu_tanh"}};
constexpr EnumName<Optimizer> kOptimizers[] = {
    {Optimizer::SGD, "sgd"}, {Optimizer::Adam, "adam"}, {Optimizer::AdamW, "adamw"}};
constexpr EnumName<LrSchedule> kLrSchedules[] = {{LrSchedule::Constant, "constant"},
                                                 {LrSchedule::Cosine, "cosine"},
                                                 {LrSchedule::Linear, "linear"}};
constexpr EnumName<Precision> kPrecisions[] = {{Precision::FP32, "fp32"},
                                               {Precision::BF16, "bf16"}};
constexpr EnumName<BatchPolicy> kBatchPolicies[] = {{BatchPolicy::PerPipeline, "per_pipeline"},
                                                    {BatchPolicy::LrScaled, "lr_scaled"},
                                                    {BatchPolicy::Global, "global"}};
constexpr EnumName<DeviceKind> kDeviceKinds[] = {{DeviceKind::CPU, "cpu"}, {DeviceKind::CUDA, "cuda"}};
constexpr EnumName<Augmentation> kAugmentations[] = {{Augmentation::HorizontalFlip, "hflip"},
                                                     {Augmentation::Crop, "crop"}};
constexpr EnumName<Checkpointing> kCheckpointing[] = {
    {Checkpointing::Never, "never"},
    {Checkpointing::ExceptLast, "except_last"},
    {Checkpointing::Always, "always"}};
constexpr EnumName<Objective> kObjectives[] = {{Objective::Time, "time"}, {Objective::Paper, "paper"}};
constexpr EnumName<FreezeRounding> kRoundings[] = {{FreezeRounding::FloorProgress, "floor_progress"},
                                                   {FreezeRounding::Floor, "floor"},
                                                   {FreezeRounding::Round, "round"},
                                                   {FreezeRounding::Ceil, "ceil"}};
constexpr EnumName<PartitionerKind> kPartitioners[] = {
    {PartitionerKind::Greedy, "greedy"}, {PartitionerKind::Optimal, "optimal"}};
constexpr EnumName<CompressionKind> kCompressions[] = {{CompressionKind::None, "none"},
                                                       {CompressionKind::Paper, "paper"},
                                                       {CompressionKind::Memory, "memory"}};
constexpr EnumName<CachePolicyKind> kCachePolicies[] = {{CachePolicyKind::Off, "off"},
                                                        {CachePolicyKind::On, "on"},
                                                        {CachePolicyKind::Auto, "auto"}};
constexpr EnumName<ScheduleKind> kSchedules[] = {
    {ScheduleKind::GPipe, "gpipe"},
    {ScheduleKind::OneFOneB, "1f1b"},
    {ScheduleKind::LoopingBreadthFirst, "looping_bf"},
    {ScheduleKind::LoopingDepthFirst, "looping_df"}};

bool is_power_of_two(int x) { return x > 0 && (x & (x - 1)) == 0; }

// Physical ranges, checked once here so that the planner, SimGrid and the
// executor only ever see values they can compute with. Wide enough for any
// real machine; the reason is part of the message.
constexpr double kMinBandwidth = 1e3, kMaxBandwidth = 1e15;  // bytes/s: 1 kB/s to 1 PB/s
constexpr const char* kBandwidthWhy = "bytes/s, 1 kB/s to 1 PB/s";
constexpr std::int64_t kMaxSamples = 1'000'000'000'000;  // a trillion: far beyond any data set, and
                                                          // samples x epochs still fits 64 bits

void read_cluster(Reader& r, ClusterSpec& c) {
  // A preset fills the node type; the file's keys override it, and the
  // node count is always the file's.
  std::string preset;
  r.string("cluster.preset", preset, false);
  if (!preset.empty()) {
    const ClusterSpec* p = find_cluster_preset(preset);
    if (!p) r.fail("cluster.preset", "one of " + cluster_preset_names(), "string \"" + preset + "\"");
    c = *p;
    c.preset = preset;
  }
  const bool required = preset.empty();  // without a preset the file describes the whole node
  r.string("cluster.name", c.name, false);
  r.integer("cluster.nodes", c.nodes, true, 1, 8192, "nodes in a cluster");
  r.integer("cluster.gpus_per_node", c.gpus_per_node, required, 1, 256, "devices in one node");
  if (static_cast<std::int64_t>(c.nodes) * c.gpus_per_node > kMaxClusterDevices)
    r.fail("cluster.nodes", "nodes x gpus_per_node <= " + std::to_string(kMaxClusterDevices) +
                                " (the planner weighs every replica layout; its time grows with the square "
                                "of the devices)",
           std::to_string(c.nodes) + " x " + std::to_string(c.gpus_per_node));
  r.integer("cluster.shared_cores", c.shared_cores, false, 0, 65536, "cores of one machine");
  auto& d = c.device;
  r.string("cluster.device.name", d.name, false);
  r.quantity("cluster.device.peak_flops_per_s", d.peak_flops_per_s, required, 1e6, 1e18,
             "FLOP/s of one device, 1 MFLOP/s to 1 EFLOP/s");
  r.quantity("cluster.device.efficiency", d.efficiency, false, 1e-3, 1,
             "the fraction of peak sustained; below 0.1% it is the peak that is wrong");
  r.quantity("cluster.device.sublayer_overhead_s", d.sublayer_overhead_s, false, 0, 10,
             "seconds per sublayer launch");
  r.quantity("cluster.device.memory_bytes", d.memory_bytes, required, 1e6, 1e15, "bytes, 1 MB to 1 PB");
  r.quantity("cluster.device.memory_bandwidth_bytes_per_s", d.memory_bandwidth_bytes_per_s, required, kMinBandwidth,
             kMaxBandwidth, kBandwidthWhy);
  for (auto [name, link] : {std::pair{"intra_node", &c.intra_node}, {"inter_node", &c.inter_node}}) {
    const std::string p = std::string("cluster.") + name;
    r.quantity(p + ".bandwidth_bytes_per_s", link->bandwidth_bytes_per_s, required, kMinBandwidth, kMaxBandwidth,
               kBandwidthWhy);
    r.latency(p + ".latency_s", link->latency_s, required);
  }
  r.quantity("cluster.host.memory_bytes", c.host.memory_bytes, required, 0, 1e16, "bytes, up to 10 PB");
  r.quantity("cluster.host.memory_bandwidth_bytes_per_s", c.host.memory_bandwidth_bytes_per_s, required, kMinBandwidth,
             kMaxBandwidth, kBandwidthWhy);
  r.quantity("cluster.host.disk_bandwidth_bytes_per_s", c.host.disk_bandwidth_bytes_per_s, required, kMinBandwidth,
             kMaxBandwidth, kBandwidthWhy);
  // Absent, and not set by a preset: 0, intra_node's (ClusterSpec::gpu_host_link_bandwidth).
  if (r.has("cluster.host.gpu_link_bandwidth_bytes_per_s") || c.host.gpu_link_bandwidth_bytes_per_s != 0)
    r.quantity("cluster.host.gpu_link_bandwidth_bytes_per_s", c.host.gpu_link_bandwidth_bytes_per_s, false,
               kMinBandwidth, kMaxBandwidth, kBandwidthWhy);
  auto& t = c.topology;
  r.integer("cluster.topology.nodes_per_switch", t.nodes_per_switch, false, 0, kMaxClusterDevices,
            "nodes under one leaf switch; 0: all of them");
  r.quantity("cluster.topology.oversubscription", t.oversubscription, false, 1, 1024,
             "a leaf's node bandwidth over its uplink's; 1: non-blocking");
  r.latency("cluster.topology.uplink_latency_s", t.uplink_latency_s, false);
}

// The model keys a checkpoint's config.json sets, each with its field, so
// that a key repeated in the file is checked against the checkpoint.
template <class Field>
struct CheckpointKey {
  const char* key;
  Field ModelConfig::*field;
};
constexpr CheckpointKey<int> kCheckpointInts[] = {
    {"model.num_hidden_layers", &ModelConfig::num_hidden_layers},
    {"model.hidden_size", &ModelConfig::hidden_size},
    {"model.intermediate_size", &ModelConfig::intermediate_size},
    {"model.num_attention_heads", &ModelConfig::num_attention_heads},
    {"model.image_size", &ModelConfig::image_size},
    {"model.patch_size", &ModelConfig::patch_size},
    {"model.num_channels", &ModelConfig::num_channels},
    {"model.vocab_size", &ModelConfig::vocab_size},
    {"model.max_position_embeddings", &ModelConfig::max_position_embeddings},
    {"model.type_vocab_size", &ModelConfig::type_vocab_size}};

// A key the file repeats from the checkpoint's config.json must agree with it.
void check_against_checkpoint(Reader& r, const ModelConfig& m, const ModelConfig& ck) {
  const std::string from = " (" + hf_config_path(ck.checkpoint) + ")";
  for (const auto& [key, field] : kCheckpointInts)
    if (r.has(key) && m.*field != ck.*field) r.fail(key, std::to_string(ck.*field) + from, std::to_string(m.*field));
  if (m.family != ck.family) r.fail("model.family", "\"" + to_string(ck.family) + "\"" + from, "\"" + to_string(m.family) + "\"");
  if (m.hidden_act != ck.hidden_act)
    r.fail("model.hidden_act", "\"" + to_string(ck.hidden_act) + "\"" + from, "\"" + to_string(m.hidden_act) + "\"");
  if (m.layer_norm_eps != ck.layer_norm_eps)
    r.fail("model.layer_norm_eps", fmt(ck.layer_norm_eps) + from, fmt(m.layer_norm_eps));
}

void read_model(Reader& r, ModelConfig& m) {
  // With a checkpoint its config.json gives the sizes (and they are
  // defaults the file may repeat); without one, the file gives them.
  r.path("model.checkpoint", m.checkpoint);
  std::optional<ModelConfig> ck;
  if (!m.checkpoint.empty()) {
    ck = read_hf_config(m.checkpoint).model;
    ck->checkpoint = m.checkpoint;
    m = *ck;
  }
  const bool required = !ck;
  r.choice("model.family", m.family, kFamilies, required);
  r.integer("model.num_hidden_layers", m.num_hidden_layers, required, 1, 1024,
            "the deepest Transformers have a few hundred layers");
  r.integer("model.hidden_size", m.hidden_size, required, 1, 1 << 17, "the widest Transformers have 2^15");
  r.integer("model.intermediate_size", m.intermediate_size, required, 1, 1 << 19, "4 x the widest hidden size");
  r.integer("model.num_attention_heads", m.num_attention_heads, required, 1, 4096, "heads of one layer");
  // A checkpoint with a classifier gives its label count; a base model's
  // (BertModel, ViTModel) is the file's, for the new classifier.
  r.integer("model.num_labels", m.num_labels, m.num_labels == 0, 1, 1 << 24, "classes of a classifier");
  r.choice("model.hidden_act", m.hidden_act, kActivations, false);
  r.quantity("model.layer_norm_eps", m.layer_norm_eps, false, 1e-30, 0.5, "added to a variance; 1e-12 to 1e-5 in practice");
  if (m.hidden_size % m.num_attention_heads != 0)
    r.fail("model.num_attention_heads", "a divisor of model.hidden_size = " + std::to_string(m.hidden_size),
           std::to_string(m.num_attention_heads));
  const bool vit = m.family == ModelFamily::ViT;
  // Keys of the other family are rejected, not silently ignored.
  for (const char* k : {"model.image_size", "model.patch_size", "model.num_channels"})
    if (!vit && r.has(k)) r.fail(k, "no ViT key in a bert model", "a ViT key");
  for (const char* k : {"model.seq_length", "model.vocab_size", "model.max_position_embeddings",
                        "model.type_vocab_size"})
    if (vit && r.has(k)) r.fail(k, "no BERT key in a vit model", "a BERT key");
  constexpr std::int64_t kMaxTokens = 1 << 20;
  constexpr const char* kTokensWhy = "tokens per sample, 2^20 at most";
  if (vit) {
    r.integer("model.image_size", m.image_size, required, 1, 1 << 16, "pixels per side");
    r.integer("model.patch_size", m.patch_size, required, 1, 1 << 16, "pixels per side");
    r.integer("model.num_channels", m.num_channels, false, 1, 1024, "channels of an image");
    if (m.image_size < m.patch_size || m.image_size % m.patch_size != 0)
      r.fail("model.image_size", "a multiple of model.patch_size = " + std::to_string(m.patch_size),
             std::to_string(m.image_size));
    const std::int64_t side = m.image_size / m.patch_size;
    if (side * side + 1 > kMaxTokens)
      r.fail("model.image_size",
             "at most " + std::to_string(kMaxTokens) + " tokens, (image_size / patch_size)^2 + 1 (" + kTokensWhy + ")",
             std::to_string(m.image_size) + " (" + std::to_string(side * side + 1) + " tokens)");
  } else {
    r.integer("model.seq_length", m.seq_length, true, 1, kMaxTokens, kTokensWhy);
    r.integer("model.vocab_size", m.vocab_size, required, 1, 1 << 24, "tokens of a vocabulary");
    if (!ck) m.max_position_embeddings = m.seq_length;
    r.integer("model.max_position_embeddings", m.max_position_embeddings, false, m.seq_length, kMaxTokens, kTokensWhy);
    r.integer("model.type_vocab_size", m.type_vocab_size, false, 1, 1024, "segment types");
    if (m.seq_length > m.max_position_embeddings)
      r.fail("model.seq_length", "at most max_position_embeddings = " + std::to_string(m.max_position_embeddings),
             std::to_string(m.seq_length));
  }
  if (ck) check_against_checkpoint(r, m, *ck);
}

void read_augment(Reader& r, DataConfig& d, const ModelConfig& m) {
  std::vector<std::string> names;
  r.string_list("data.augment", names);
  if (!names.empty() && m.family != ModelFamily::ViT)
    r.fail("data.augment", "no augmentation for model.family = \"" + to_string(m.family) + "\" (images only)",
           std::to_string(names.size()) + " transform(s)");
  for (const std::string& name : names) {
    const Augmentation* a = enum_value(kAugmentations, name);
    if (!a) r.fail("data.augment", "elements " + enum_choices(kAugmentations), "\"" + name + "\"");
    if (std::find(d.augment.begin(), d.augment.end(), *a) != d.augment.end())
      r.fail("data.augment", "distinct transforms", "\"" + name + "\" twice");
    d.augment.push_back(*a);
  }
}

void read_data(Reader& r, DataConfig& d, const ModelConfig& m) {
  r.string("data.name", d.name, true);
  r.path("data.path", d.path);
  r.integer("data.num_train_samples", d.num_train_samples, true, 1, kMaxSamples,
            "a trillion samples: beyond any data set, and kept so that counts of iterations fit 64 bits");
  r.integer("data.num_test_samples", d.num_test_samples, true, 1, kMaxSamples,
            "a trillion samples (accuracy is over them: 0 would evaluate nothing)");
  r.int_list("data.classes", d.classes);
  for (std::size_t i = 0; i < d.classes.size(); ++i) {
    if (d.classes[i] < 0) r.fail("data.classes", "class ids >= 0", "an element " + std::to_string(d.classes[i]));
    for (std::size_t j = 0; j < i; ++j)
      if (d.classes[j] == d.classes[i])
        r.fail("data.classes", "distinct class ids", std::to_string(d.classes[i]) + " twice");
  }
  read_augment(r, d, m);
}

void read_training(Reader& r, TrainingConfig& t, const ModelConfig& m) {
  r.integer("training.epochs", t.epochs, true, 1, 10000,
            "passes over the data; the longest published trainings run a few thousand");
  r.integer("training.batch_size", t.batch_size, true, 1, 1 << 24, "samples per pipeline and iteration");
  r.choice("training.optimizer", t.optimizer, kOptimizers, true);
  r.number("training.lr", t.lr, true);
  r.number("training.momentum", t.momentum, false);
  r.number("training.weight_decay", t.weight_decay, false);
  r.choice("training.lr_schedule", t.lr_schedule, kLrSchedules, false);
  r.integer("training.warmup_steps", t.warmup_steps, false, 0, INT_MAX, "iterations, a 32-bit count");
  std::int64_t seed = 0;
  r.integer("training.seed", seed, true, 0, INT64_MAX, "");
  t.seed = static_cast<std::uint64_t>(seed);
  r.choice("training.precision", t.precision, kPrecisions, false);
  r.choice("training.checkpointing", t.checkpointing, kCheckpointing, false);
  r.choice("training.batch_policy", t.batch_policy, kBatchPolicies, false);
  r.path("training.init_weights", t.init_weights);
  r.string_list("training.init_keep", t.init_keep);
  if (!t.init_keep.empty() && t.init_weights.empty() && m.checkpoint.empty())
    r.fail("training.init_keep",
           "no init_keep without training.init_weights or model.checkpoint (nothing is loaded to keep from)",
           std::to_string(t.init_keep.size()) + " prefixes");
  if (!t.init_weights.empty() && !m.checkpoint.empty())
    r.fail("training.init_weights", "none with model.checkpoint (training starts from the checkpoint's weights)",
           "\"" + t.init_weights + "\"");
  if (!(t.lr > 0)) r.fail("training.lr", "a number > 0", fmt(t.lr));
  if (!(t.momentum >= 0 && t.momentum < 1)) r.fail("training.momentum", "a number in [0, 1)", fmt(t.momentum));
  if (!(t.weight_decay >= 0)) r.fail("training.weight_decay", "a number >= 0", fmt(t.weight_decay));
}

// Each freeze step is a plan, planned, priced and written: 1,000 steps of
// a 1,024-GPU config take minutes and 1.6 GB (docs/FAILURES.md).
constexpr int kMaxFreezeSteps = 1000;

void check_freeze_steps(Reader& r, const TrainingConfig& t, const PlannerConfig& p) {
  const int steps = (t.epochs + p.freeze_interval_epochs - 1) / p.freeze_interval_epochs;
  if (steps > kMaxFreezeSteps)
    r.fail("planner.freeze_interval_epochs",
           "at most " + std::to_string(kMaxFreezeSteps) + " freeze steps in training.epochs = " +
               std::to_string(t.epochs) + " (each is a plan)",
           std::to_string(p.freeze_interval_epochs) + ", " + std::to_string(steps) + " steps");
}

// planner.freeze_policy = "replay" takes exactly one source of frozen
// counts, and only it takes one; a replayed list is a possible run.
void check_replay(Reader& r, const PlannerConfig& p, int L) {
  const bool replay = p.freeze_policy == "replay";
  const bool has_list = r.has("planner.replay_frozen");
  const bool has_file = r.has("planner.replay_grad_norms_file");
  if (replay && has_list == has_file)
    r.fail("planner.freeze_policy",
           "with \"replay\", exactly one of planner.replay_frozen or planner.replay_grad_norms_file",
           has_list ? "both" : "neither");
  if (!replay && (has_list || has_file))
    r.fail(has_list ? "planner.replay_frozen" : "planner.replay_grad_norms_file",
           "only with planner.freeze_policy = \"replay\"", "freeze_policy = \"" + p.freeze_policy + "\"");
  int prev = 0;
  for (std::size_t i = 0; i < p.replay_frozen.size(); ++i) {
    const int f = p.replay_frozen[i];
    if (f < prev || f > L - p.min_active_layers)
      r.fail("planner.replay_frozen",
             "non-decreasing frozen counts in [0, L - min_active_layers = " +
                 std::to_string(L - p.min_active_layers) + "]",
             std::to_string(f) + " at position " + std::to_string(i));
    prev = f;
  }
}

void read_planner(Reader& r, const Config& c, PlannerConfig& p) {
  // The chunk search simulates every M in [M_min_factor K, M_max_factor K].
  constexpr const char* kChunkSearchWhy = "micro-batches per stage the chunk search simulates";
  r.choice("planner.objective", p.objective, kObjectives, false);
  r.number("planner.alpha", p.alpha, false);
  r.number("planner.lambda_frozen", p.lambda_frozen, false);
  r.integer("planner.freeze_interval_epochs", p.freeze_interval_epochs, false, 1, 10000, "epochs");
  r.choice("planner.freeze_policy", p.freeze_policy, freeze_policy_names(), false);
  r.choice("planner.freeze_rounding", p.freeze_rounding, kRoundings, false);
  r.integer("planner.min_active_layers", p.min_active_layers, false, 1, INT_MAX, "layers");
  r.int_list("planner.replay_frozen", p.replay_frozen);
  r.path("planner.replay_grad_norms_file", p.replay_grad_norms_file);
  r.choice("planner.partitioner", p.partitioner, kPartitioners, false);
  r.choice("planner.compression", p.compression, kCompressions, false);
  p.K = c.cluster.gpus_per_node;
  r.integer("planner.K", p.K, false, 1, 256, "devices in one node");
  r.boolean("planner.chunk_search", p.chunk_search);
  r.integer("planner.M", p.M, !p.chunk_search, 1, 1 << 24, "micro-batches of one batch");
  r.integer("planner.M_min_factor", p.M_min_factor, false, 1, 64, kChunkSearchWhy);
  r.integer("planner.M_max_factor", p.M_max_factor, false, 1, 64, kChunkSearchWhy);
  r.choice("planner.cache", p.cache, kCachePolicies, false);
  if (p.cache == CachePolicyKind::On && !c.data.augment.empty())
    r.fail("planner.cache",
           "\"off\" or \"auto\" with data.augment (an augmented input changes the frozen layers' outputs every "
           "epoch: a cache would serve stale ones)",
           "\"on\"");
  r.choice("planner.schedule", p.schedule, kSchedules, false);
  r.integer("planner.virtual_stages", p.virtual_stages, false, 1, 64, "chunks per device");
  r.quantity("planner.bucket_size_bytes", p.bucket_size_bytes, false, 1 << 20, 1e12,
             "bytes per all-reduce bucket, 1 MiB to 1 TB: smaller buckets multiply the all-reduces");
  r.boolean("planner.autopipe", p.autopipe);
  r.boolean("planner.autodp", p.autodp);

  const int L = c.model.num_hidden_layers;
  if (!(p.alpha > 0 && p.alpha < 1)) r.fail("planner.alpha", "a number in (0, 1)", fmt(p.alpha));
  if (!(p.lambda_frozen >= 0 && p.lambda_frozen <= 1))
    r.fail("planner.lambda_frozen", "a number in [0, 1]", fmt(p.lambda_frozen));
  if (p.min_active_layers < 1 || p.min_active_layers > L)
    r.fail("planner.min_active_layers",
           "an integer in [1, model.num_hidden_layers = " + std::to_string(L) + "]",
           std::to_string(p.min_active_layers));
  if (p.K < 1 || !is_power_of_two(p.K))
    r.fail("planner.K", "a power of two >= 1", std::to_string(p.K));
  if (p.K > c.cluster.gpus_per_node)
    r.fail("planner.K",
           "at most cluster.gpus_per_node = " + std::to_string(c.cluster.gpus_per_node) +
               " (a pipeline lives inside one node)",
           std::to_string(p.K));
  if (c.cluster.gpus_per_node % p.K != 0)
    r.fail("planner.K", "a divisor of cluster.gpus_per_node = " + std::to_string(c.cluster.gpus_per_node),
           std::to_string(p.K));
  // A pipeline of K stages needs at least K sublayer units (2 per layer).
  if (p.K > 2 * L)
    r.fail("planner.K", "at most 2 * model.num_hidden_layers = " + std::to_string(2 * L) +
                            " (one sublayer per stage)", std::to_string(p.K));
  const bool looping = p.schedule == ScheduleKind::LoopingBreadthFirst ||
                       p.schedule == ScheduleKind::LoopingDepthFirst;
  if (p.virtual_stages > 1 && !looping)
    r.fail("planner.virtual_stages", "1 unless planner.schedule is looping_bf or looping_df",
           std::to_string(p.virtual_stages));
  if (p.K * p.virtual_stages > 2 * L)
    r.fail("planner.virtual_stages",
           "K * virtual_stages at most 2 * model.num_hidden_layers = " + std::to_string(2 * L),
           std::to_string(p.virtual_stages));
  if (p.M_max_factor < p.M_min_factor)
    r.fail("planner.M_max_factor",
           "an integer >= planner.M_min_factor = " + std::to_string(p.M_min_factor),
           std::to_string(p.M_max_factor));
  const int batch = c.training.batch_size;
  if (p.chunk_search) {
    if (r.has("planner.M"))
      r.fail("planner.M", "no fixed M while planner.chunk_search = true", "M = " + std::to_string(p.M));
    if (batch < p.M_min_factor * p.K)
      r.fail("training.batch_size",
             "at least the smallest micro-batch count M_min_factor * K = " +
                 std::to_string(p.M_min_factor * p.K),
             std::to_string(batch));
  } else {
    if (batch < p.M)
      r.fail("training.batch_size", "at least the micro-batch count planner.M = " + std::to_string(p.M),
             std::to_string(batch));
  }

  check_replay(r, p, L);
}

// The facts of [exec] the planner plans with (exec/exec_config.cpp reads the rest).
void read_device(Reader& r, Config& c) {
  r.choice("exec.device", c.device, kDeviceKinds, false);
  r.integer("exec.threads_per_worker", c.threads_per_worker, false, 0, 4096, "threads of one machine");
}

void read_transition(Reader& r, TransitionSpec& t) {
  // Replaced by formulas of the plan (planner/transition.cpp): one way to say each.
  if (r.has("cluster.transition.ddp_rebuild_s"))
    r.fail("cluster.transition.ddp_rebuild_s",
           "cluster.transition.group_setup_s and group_per_rank_s (the group is priced by its ranks)",
           "the former key ddp_rebuild_s");
  if (r.has("cluster.transition.pipeline_warmup_s"))
    r.fail("cluster.transition.pipeline_warmup_s",
           "cluster.transition.warmup_iterations (the warm-up in the new plan's iterations)",
           "the former key pipeline_warmup_s");
  for (auto [key, v] : {std::pair{"cluster.transition.context_creation_s", &t.context_creation_s},
                        {"cluster.transition.group_setup_s", &t.group_setup_s}})
    r.quantity(key, *v, false, 0, 1e5, "seconds per transition part, about a day at most");
  r.quantity("cluster.transition.group_per_rank_s", t.group_per_rank_s, false, 0, 10,
             "seconds per rank of a group made (10 s a rank is 23 hours at 8,192 ranks)");
  r.quantity("cluster.transition.warmup_iterations", t.warmup_iterations, false, 0, 1000,
             "extra iterations the first one after a freeze step takes");
}

// A config is a few kB of TOML; a megabyte is far beyond any.
constexpr InputFormat kConfigFile{"config", 1 << 20, "a config is a few kB of TOML"};

}  // namespace

Config parse_config(const std::string& toml_text, const std::string& origin, const Overrides& overrides) {
  auto doc = std::make_shared<ConfigDocument>();
  try {
    doc->root = toml::parse(toml_text, origin);
  } catch (const toml::parse_error& e) {
    throw Error(origin + ":" + std::to_string(e.source().begin.line) + ":" +
                std::to_string(e.source().begin.column) + ": TOML syntax error: " +
                std::string(e.description()));
  }
  doc->origin = origin;
  doc->overridden = apply_overrides(doc->root, overrides);

  Config c;
  c.source = origin;
  Reader r(*doc);
  for (const char* sec : {"cluster", "model", "data", "training"})
    if (!r.has(sec)) r.fail(sec, "a [" + std::string(sec) + "] section", "none");
  read_cluster(r, c.cluster);
  read_transition(r, c.cluster.transition);
  read_model(r, c.model);
  read_data(r, c.data, c.model);
  read_training(r, c.training, c.model);
  read_planner(r, c, c.planner);
  check_freeze_steps(r, c.training, c.planner);
  read_device(r, c);
  // [sim] and [exec] are the back ends' to check (sim/sim_config.cpp,
  // exec/exec_config.cpp).
  r.reject_unknown({"cluster", "data", "exec", "model", "planner", "sim", "training"}, {"exec", "sim"});
  c.positions = r.positions();
  doc->path_keys = r.path_keys();
  c.document = std::move(doc);
  check_dataset(c);
  return c;
}

std::string settings_text(const Config& c, const std::set<std::string>& more_path_keys) {
  if (!c.document) throw Error("settings_text: a config built in code has no settings");
  toml::table root = c.document->root;
  for (const std::set<std::string>* keys : {&c.document->path_keys, &more_path_keys})
    for (const std::string& key : *keys) {
      const std::size_t dot = key.find('.');
      if (toml::table* section = root[key.substr(0, dot)].as_table()) section->erase(key.substr(dot + 1));
    }
  std::ostringstream os;
  os << toml::toml_formatter(root);
  return os.str();
}

std::map<std::string, std::string> describe(const Config& c) {
  // The shortest text that reads back as the same double: a trace writes
  // it as a JSON number (traces/io.hpp, metadata_json).
  const auto num = [](double v) {
    char buf[32];
    return std::string(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
  };
  const auto& pc = c.planner;
  return {{"model", to_string(c.model.family) + " L=" + std::to_string(c.model.num_hidden_layers)},
          {"data", c.data.name},
          {"cluster", std::to_string(c.cluster.nodes) + "x" + std::to_string(c.cluster.gpus_per_node) + " " +
                          c.cluster.device.name},
          {"objective", to_string(pc.objective)},
          {"alpha", num(pc.alpha)},
          {"lambda_frozen", num(pc.lambda_frozen)},
          {"K0", std::to_string(pc.K)},
          {"freeze_policy", pc.freeze_policy},
          {"partitioner", to_string(pc.partitioner)},
          {"compression", to_string(pc.compression)},
          {"schedule", to_string(pc.schedule)},
          {"epochs", std::to_string(c.training.epochs)},
          {"batch_size", std::to_string(c.training.batch_size)},
          {"num_train_samples", std::to_string(c.data.num_train_samples)},
          // What an action's time depends on, beside the batch: trace diff
          // compares only traces of one workload.
          {"workload", "hidden " + std::to_string(c.model.hidden_size) + ", intermediate " +
                           std::to_string(c.model.intermediate_size) + ", heads " +
                           std::to_string(c.model.num_attention_heads) + ", tokens " +
                           std::to_string(c.model.tokens()) + ", " + to_string(c.training.precision)}};
}

Error Config::error(const std::string& key, const std::string& expected, const std::string& found) const {
  const auto it = positions.find(key);
  return config_error(it != positions.end() ? it->second : SourcePos{source, 0, 0}, key, expected, found);
}

Config load_config(const std::string& path, const Overrides& overrides) {
  return parse_config(read_input_file(path, kConfigFile), path, overrides);
}

std::string to_string(ModelFamily v) { return enum_name(kFamilies, v); }
std::string to_string(Augmentation v) { return enum_name(kAugmentations, v); }
std::string to_string(Activation v) { return enum_name(kActivations, v); }
std::string to_string(Optimizer v) { return enum_name(kOptimizers, v); }
std::string to_string(DeviceKind v) { return enum_name(kDeviceKinds, v); }
std::string to_string(LrSchedule v) { return enum_name(kLrSchedules, v); }
std::string to_string(Precision v) { return enum_name(kPrecisions, v); }
std::string to_string(Checkpointing v) { return enum_name(kCheckpointing, v); }
std::string to_string(BatchPolicy v) { return enum_name(kBatchPolicies, v); }
std::string to_string(FreezeRounding v) { return enum_name(kRoundings, v); }
std::string to_string(Objective v) { return enum_name(kObjectives, v); }
std::string to_string(PartitionerKind v) { return enum_name(kPartitioners, v); }
std::string to_string(CompressionKind v) { return enum_name(kCompressions, v); }
std::string to_string(CachePolicyKind v) { return enum_name(kCachePolicies, v); }
std::string to_string(ScheduleKind v) { return enum_name(kSchedules, v); }
std::optional<ScheduleKind> parse_schedule_kind(const std::string& s) {
  for (const auto& e : kSchedules)
    if (s == e.name) return e.value;
  return std::nullopt;
}

}  // namespace ep
