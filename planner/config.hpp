// One config describes a whole experiment: the cluster, the model, the data,
// the training recipe and the planner's knobs. Names follow the paper
// (alpha, lambda_frozen, K, M). Units are in the key names (_s, _bytes,
// _per_s, _flops). Validated once, on load (config.cpp); the rest of the
// planner trusts these values.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "planner/error.hpp"

namespace ep {

struct DeviceSpec {
  std::string name = "device";
  double peak_flops_per_s = 0;   // peak in the precision trained (the paper: FP32; the DGX presets: dense BF16)
  double efficiency = 0.4;       // fraction of peak a Transformer sublayer reaches
  double sublayer_overhead_s = 0;  // fixed launch cost per sublayer execution
  double memory_bytes = 0;
  double memory_bandwidth_bytes_per_s = 0;
};

struct LinkSpec {
  double bandwidth_bytes_per_s = 0;
  double latency_s = 0;
};

struct HostSpec {
  double memory_bytes = 0;                 // host RAM available to the activation cache
  double memory_bandwidth_bytes_per_s = 0;  // cache read/write from host memory
  double disk_bandwidth_bytes_per_s = 0;    // cache spill tier
  // Each GPU's own link to host memory (its PCIe x16); 0: intra_node's
  // (GPUs that reach each other over PCIe too, as the paper's).
  double gpu_link_bandwidth_bytes_per_s = 0;
};

// What moving between plans costs beyond the bytes moved (SPEC §7), the
// parts a cluster's software stack sets; the planner weighs them (objective
// "time") and the simulator charges them.
// What a transition's fixed parts cost on this cluster: the terms of the
// formulas in planner/transition.cpp (docs/SIMULATOR.md, "Transition costs",
// gives each one's source). A profile's measurements replace them where it
// has them, scaled by the same formulas.
struct TransitionSpec {
  double context_creation_s = 3.0;  // a process's one-off work where one starts: device context, libraries, kernels
  double group_setup_s = 1.3;       // an active group made (new ranks or lanes): its fixed part
  double group_per_rank_s = 0.085;  // and per rank of it (the bootstrap gathers every rank's address and topology)
  double warmup_iterations = 0.5;   // the first iteration after a freeze step or a repartition: extra steady iterations

  // group(n) = group_setup_s + group_per_rank_s * n for n > 1 ranks; none for one.
  [[nodiscard]] double group_s(int ranks) const { return ranks > 1 ? group_setup_s + group_per_rank_s * ranks : 0.0; }
};

// How nodes hang together (a two-level fat tree): leaf switches of
// nodes_per_switch nodes, each with one uplink to the spine carrying
// nodes_per_switch x inter_node bandwidth / oversubscription. A node's link
// to its leaf is inter_node. The planner's analytic model sees inter_node
// only; the simulator routes over the switches.
struct TopologySpec {
  int nodes_per_switch = 0;     // 0: every node under one switch, no spine
  double oversubscription = 1;  // >= 1; 1: non-blocking
  double uplink_latency_s = 0;  // a leaf-spine hop, paid once each way up and down

  // Whether nodes 0..nodes-1 all hang off one switch.
  [[nodiscard]] bool flat(int nodes) const { return nodes_per_switch == 0 || nodes_per_switch >= nodes; }
};

// Devices of the largest cluster a config may describe: planning takes
// seconds there, and grows with the square of the devices.
constexpr int kMaxClusterDevices = 8192;

struct ClusterSpec {
  std::string name;
  std::string preset;  // the cluster preset the config started from (cluster_presets.hpp); empty: none
  int nodes = 1;
  int gpus_per_node = 1;
  DeviceSpec device;
  LinkSpec intra_node;  // GPU to GPU inside a node (paper: PCIe 3.0 x16)
  LinkSpec inter_node;  // node to node (paper: InfiniBand FDR 56 Gb/s)
  HostSpec host;
  // 0: every device computes on its own. > 0: the node's devices are threads
  // sharing this many CPU cores (the CPU executor on one machine), so their
  // compute slows down when more of them run at once than there are cores.
  int shared_cores = 0;
  TransitionSpec transition;
  TopologySpec topology;

  [[nodiscard]] int total_gpus() const { return nodes * gpus_per_node; }
  [[nodiscard]] double gpu_host_link_bandwidth() const {
    return host.gpu_link_bandwidth_bytes_per_s == 0 ? intra_node.bandwidth_bytes_per_s
                                                    : host.gpu_link_bandwidth_bytes_per_s;
  }
};

enum class ModelFamily { ViT, Bert };
// The MLP's GELU: exact (erf), or the tanh approximation (Hugging Face's
// gelu_new, gelu_pytorch_tanh, gelu_fast).
enum class Activation { Gelu, GeluTanh };

struct ModelConfig {
  ModelFamily family = ModelFamily::ViT;
  int num_hidden_layers = 0;    // L
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_attention_heads = 0;
  int num_labels = 0;
  // ViT
  int image_size = 0;
  int patch_size = 0;
  int num_channels = 3;
  // BERT
  int seq_length = 0;
  int vocab_size = 0;
  int max_position_embeddings = 0;
  int type_vocab_size = 2;
  Activation hidden_act = Activation::Gelu;
  double layer_norm_eps = 1e-12;
  // A Hugging Face checkpoint folder (config.json, model.safetensors; see
  // planner/hf_model.hpp): the model's sizes come from its config.json, and
  // training starts from its weights. Empty: none.
  std::string checkpoint;

  // Tokens per sample: ViT (image/patch)^2 + class token; BERT seq_length.
  [[nodiscard]] int tokens() const {
    if (family == ModelFamily::ViT) {
      const int per_side = image_size / patch_size;
      return per_side * per_side + 1;
    }
    return seq_length;
  }
};

// Random transforms of a training image, drawn per sample and epoch
// (exec/data.hpp: augment_image); evaluation sees the images as they are.
enum class Augmentation { HorizontalFlip, Crop };

struct DataConfig {
  std::string name;
  std::string path;  // empty: synthetic or discovered by the executor
  std::int64_t num_train_samples = 0;
  std::int64_t num_test_samples = 0;
  // fashion-mnist: the classes kept, relabelled 0, 1, ... in this order (a
  // task of its own, e.g. to fine-tune on); empty: all ten.
  std::vector<int> classes;
  // Image models only. An augmented input changes the frozen layers'
  // outputs every epoch, so no cache of them can serve training: AutoCache
  // stays off (planner/cache_policy.hpp: cache_allowed) and planner.cache =
  // "on" is refused.
  std::vector<Augmentation> augment;
};

enum class Optimizer { SGD, Adam, AdamW };
enum class LrSchedule { Constant, Cosine, Linear };
enum class Precision { FP32, BF16 };
// Activation recomputation, as torchgpipe / torch Pipe's `checkpoint`.
enum class Checkpointing { Never, ExceptLast, Always };

enum class BatchPolicy { PerPipeline, LrScaled, Global };

struct TrainingConfig {
  int epochs = 1;
  int batch_size = 0;  // per pipeline, N_bs
  Optimizer optimizer = Optimizer::SGD;
  double lr = 0.01;
  double momentum = 0.9;
  double weight_decay = 0;
  LrSchedule lr_schedule = LrSchedule::Constant;
  int warmup_steps = 0;
  std::uint64_t seed = 0;
  Precision precision = Precision::FP32;
  Checkpointing checkpointing = Checkpointing::ExceptLast;
  // How data parallelism scales (AutoDP adds replicas as layers freeze):
  // per_pipeline (the paper's): each pipeline keeps batch_size, so the
  // global batch grows with the replicas at the same lr; lr_scaled: the
  // same, with lr multiplied by replicas / the replicas of planner.K (the
  // linear scaling rule); global: the global batch stays batch_size times
  // the replicas of planner.K and the replicas split it (what a DDP user
  // keeps fixed), so every layout makes the same updates per epoch: the
  // default, so that a speedup compares the same training.
  BatchPolicy batch_policy = BatchPolicy::Global;
  // Fine-tuning: the weights training starts from (a weights.bin that
  // `train` wrote, matched by parameter name and shape); empty: from the
  // seed. init_keep: name prefixes of parameters that keep their seeded
  // values instead (e.g. "head." for a new classifier).
  std::string init_weights;
  std::vector<std::string> init_keep;
};

// floor_progress: floor, but at least one more layer per step until
// L - min_active_layers (plain floor stalls once alpha (L - f) < 1, e.g. at
// 10 of 12 layers with alpha = 1/3).
enum class FreezeRounding { FloorProgress, Floor, Round, Ceil };
enum class PartitionerKind { Greedy, Optimal };
// What the planner's choices minimise. time: the predicted time to the end of
// training (K, partition, M, replicas, cache chosen together, transitions and
// cache fills counted); paper: the paper's proxies (greedy on parameters,
// Eq. 2 compression, the cache threshold), for reproducing its figures.
enum class Objective { Time, Paper };
enum class CompressionKind { None, Paper, Memory };
enum class CachePolicyKind { Off, On, Auto };
enum class ScheduleKind { GPipe, OneFOneB, LoopingBreadthFirst, LoopingDepthFirst };

struct PlannerConfig {
  Objective objective = Objective::Time;
  double alpha = 1.0 / 3.0;
  double lambda_frozen = 1.0 / 6.0;
  int freeze_interval_epochs = 1;  // one freeze step T at the end of every N epochs
  std::string freeze_policy = "alpha";  // a registered policy's name (planner/freeze.hpp)
  FreezeRounding freeze_rounding = FreezeRounding::FloorProgress;
  int min_active_layers = 1;
  std::vector<int> replay_frozen;       // replay: L_frozen per freeze step
  std::string replay_grad_norms_file;   // replay: recorded gradient norms (CSV)
  PartitionerKind partitioner = PartitionerKind::Greedy;
  CompressionKind compression = CompressionKind::Paper;
  int K = 0;  // paper: the initial pipeline length K_0; time: the longest pipeline allowed (0 in the file is rejected)
  bool chunk_search = true;
  int M = 0;  // fixed micro-batch count when chunk_search = false
  int M_min_factor = 1;  // chunk search: M in [M_min_factor*K, M_max_factor*K]
  int M_max_factor = 6;
  CachePolicyKind cache = CachePolicyKind::Auto;
  ScheduleKind schedule = ScheduleKind::GPipe;
  int virtual_stages = 1;  // v, chunks per device for looping schedules
  double bucket_size_bytes = 25.0 * 1024 * 1024;
  bool autopipe = true;  // ablation switches (speedup breakdown)
  bool autodp = true;
};

// The kind of device the run executes on (exec.device): the planner
// prices and lowers for it (cache writes behind a GPU, shared CPU cores).
enum class DeviceKind { CPU, CUDA };

// The document a Config was read from (planner/config_reader.hpp): the back
// ends read their own sections from it (sim/sim_config.hpp,
// exec/exec_config.hpp).
struct ConfigDocument;

struct Config {
  std::string source;  // path the config was loaded from
  ClusterSpec cluster;
  ModelConfig model;
  DataConfig data;
  TrainingConfig training;
  PlannerConfig planner;
  // The two facts of [exec] the planner plans with; the executor reads the
  // rest of its section itself.
  DeviceKind device = DeviceKind::CPU;  // cuda: stage device k is cuda:(k mod visible GPUs)
  int threads_per_worker = 0;  // intra-op threads per stage worker; 0: cores / K of the plan, at least 1
  std::shared_ptr<const ConfigDocument> document;
  // Where each key read came from, so a back end that checks a value the
  // planner does not (the executor's dataset name, say) reports it the same
  // way: file:line, key, expected, found.
  std::map<std::string, SourcePos> positions;
  [[nodiscard]] Error error(const std::string& key, const std::string& expected,
                            const std::string& found) const;
};

// "section.key=value" overrides from the command line (--set).
using Overrides = std::vector<std::string>;

// The config as read, --set values applied, as TOML text without the paths
// the planner read nor `more_path_keys` (a back end's): what every process
// of one job must share (they compare its digest at start; a path may
// differ where the file it names does not).
[[nodiscard]] std::string settings_text(const Config&, const std::set<std::string>& more_path_keys);

// Load, apply overrides, validate the planner's sections (a back end
// validates its own). Throws ep::Error naming file:line, the
// key, what was expected and what was found.
Config load_config(const std::string& path, const Overrides& overrides = {});
// Same, from TOML text (tests); `origin` names it in messages.
Config parse_config(const std::string& toml_text, const std::string& origin,
                    const Overrides& overrides = {});

// The config's headline values (model, data, cluster, alpha, lambda_frozen,
// K0, policies, epochs, batch), as trace metadata: both back ends write
// them, and the figures read alpha from them.
[[nodiscard]] std::map<std::string, std::string> describe(const Config&);

// Names as written in config files, for printing.
std::string to_string(ModelFamily);
std::string to_string(Augmentation);
std::string to_string(Activation);
std::string to_string(Optimizer);
std::string to_string(LrSchedule);
std::string to_string(Precision);
std::string to_string(Checkpointing);
std::string to_string(BatchPolicy);
std::string to_string(FreezeRounding);
std::string to_string(PartitionerKind);
std::string to_string(Objective);
std::string to_string(CompressionKind);
std::string to_string(CachePolicyKind);
std::string to_string(ScheduleKind);
// The config's name of a schedule kind ("gpipe", "1f1b", "looping_bf",
// "looping_df"); nullopt for any other text.
std::optional<ScheduleKind> parse_schedule_kind(const std::string&);
std::string to_string(DeviceKind);

}  // namespace ep
