#include "exec/job.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>

#include "exec/cache.hpp"
#include "exec/exec_config.hpp"
#include "exec/prepared_data.hpp"
#include "exec/streams.hpp"
#include "exec/trainer.hpp"
#include "planner/random.hpp"
#include "planner/run_plan.hpp"
#include "traces/output_dir.hpp"

namespace ep::exec {

void check_process_count(const Config& c, int processes) {
  const int gpus = c.cluster.total_gpus();
  // One process per potential pipeline: the planner's process model (one per
  // GPU, node-major ranks), so every layout's ranks exist.
  if (processes != 1 && processes != gpus)
    throw Error("this job has " + std::to_string(processes) + " processes; " + c.source +
                " needs one per device: cluster.nodes x cluster.gpus_per_node = " + std::to_string(gpus) +
                " (elasticpipe train --nproc " + std::to_string(gpus) + ")");
}

namespace {

// What this executor can train; whether the config agrees with the data set
// was checked at load (planner/datasets.hpp).
void check_trainable_dataset(const Config& c) {
  const std::string& name = c.data.name;
  if (name != "fashion-mnist" && name != "synthetic-images" && name != "synthetic-tokens" && name != "prepared")
    throw c.error("data.name", "fashion-mnist|synthetic-images|synthetic-tokens|prepared to train", "\"" + name + "\"");
}

void check_memory(const Config& c) {
  const bool vit = c.model.family == ModelFamily::ViT;
  const std::string& name = c.data.name;
  // Synthetic data sets live in memory: a size beyond this machine's is
  // refused before any allocation (which would otherwise swap or be killed).
  if (name != "fashion-mnist" && name != "prepared") {  // those two are files, read with their bounds
    const double per_sample = vit ? 4.0 * c.model.num_channels * c.model.image_size * c.model.image_size
                                  : 8.0 * c.model.seq_length;
    const double bytes = per_sample * static_cast<double>(c.data.num_train_samples + c.data.num_test_samples);
    const double ram = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
    if (ram > 0 && bytes > ram / 2) {
      char found[160];
      std::snprintf(found, sizeof found, "%lld (%.3g GB of samples, with the test set)",
                    static_cast<long long>(c.data.num_train_samples), bytes / 1e9);
      char expected[200];
      std::snprintf(expected, sizeof expected,
                    "synthetic samples that fit half of this machine's %.3g GB of memory", ram / 1e9);
      throw c.error("data.num_train_samples", expected, found);
    }
  }
}

}  // namespace

void check_runnable(const Config& c, const ProcessEnv& env) {
  check_trainable_dataset(c);
  // Every K a plan can reach (the planner's list).
  int most = 1, most_K = c.planner.K;
  for (const int K : reachable_K(c)) {
    const int r = replica_layout(c, K).replicas;
    if (r > most) most = r, most_K = K;
  }
  const int gpus = c.cluster.total_gpus();
  check_process_count(c, env.world_size);
  if (most > 1 && env.world_size == 1)
    throw Error(c.source + ": the plans reach " + std::to_string(most) + " data-parallel replicas (at K = " +
                std::to_string(most_K) + "); one process trains one pipeline: run elasticpipe train --nproc " +
                std::to_string(gpus) + " (or set planner.autodp = false)");
  check_memory(c);
  if (c.device != DeviceKind::CUDA) return;
  const int visible = check_device(c);
  check_gpus_not_shared(c, visible);
  check_gpus_visible(c, visible);
}

int check_device(const Config& c) {
  if (c.device != DeviceKind::CUDA) return 0;
#ifdef ELASTICPIPE_CUDA
  constexpr const char* no_cuda = "cpu (no CUDA device is visible: no GPU or driver, or CUDA_VISIBLE_DEVICES hides it)";
#else
  constexpr const char* no_cuda = "cpu (this build has no CUDA path: scripts/setup.sh builds one where nvcc is found)";
#endif
  if (!at::hasCUDA()) throw c.error("exec.device", no_cuda, "\"cuda\"");
  return static_cast<int>(at::getNumGPUs());
}

void check_gpus_visible(const Config& c, int visible) {
  const int I = c.cluster.gpus_per_node;
  if (c.device != DeviceKind::CUDA || visible >= I) return;
  throw c.error("cluster.gpus_per_node",
                "at most the " + std::to_string(visible) + " GPU(s) this process sees (the plans put each stage and "
                "replica on a GPU of its own; sharing one, they would run slower than planned and simulated)",
                std::to_string(I));
}

void check_gpus_not_shared(const Config& c, int visible) {
  if (c.device != DeviceKind::CUDA || visible < 1) return;
  const int I = c.cluster.gpus_per_node;
  for (const int K : reachable_K(c)) {
    const ReplicaLayout l = replica_layout(c, K);
    for (int k = 0; k < K; ++k) {
      std::map<std::pair<int, int>, int> owner;  // (node, CUDA index) -> rank
      for (const auto& r : l.replica) {
        const int index = r.gpus[k] % I % visible;  // as Trainer::plan_devices places it
        const auto [it, fresh] = owner.emplace(std::pair{r.node, index}, r.rank);
        if (!fresh)
          throw Error(c.source + ": ranks " + std::to_string(it->second) + " and " + std::to_string(r.rank) +
                      " would share cuda:" + std::to_string(index) + " on node " + std::to_string(r.node) +
                      " in NCCL lane " + std::to_string(k) + " (K = " + std::to_string(K) + ", " +
                      std::to_string(l.replicas) + " replicas), and NCCL refuses two ranks of one communicator on one "
                      "device: this process sees " + std::to_string(visible) + " GPU(s), cluster.gpus_per_node is " +
                      std::to_string(I) + "; run on a node with " + std::to_string(I) +
                      " GPUs, or set cluster.gpus_per_node to the GPUs visible");
      }
    }
  }
}

namespace {

// A prepared split against the config: its kind, shape and classes are the
// model's, refused as a config error of data.path naming the file.
void check_prepared(const Config& c, const Dataset& d, const std::string& file) {
  const auto& m = c.model;
  const bool vit = m.family == ModelFamily::ViT;
  if ((d.kind == SampleKind::Image) != vit)
    throw c.error("data.path", std::string(vit ? "images" : "tokens") + " for model.family = \"" + to_string(m.family) + "\"",
                  std::string(d.kind == SampleKind::Image ? "images" : "tokens") + " in " + file);
  const std::string found = d.kind == SampleKind::Image ? std::to_string(d.channels) + " x " + std::to_string(d.height) +
                                                              " x " + std::to_string(d.width)
                                                        : std::to_string(d.seq_length) + " tokens";
  if (vit && (d.channels != m.num_channels || d.height != m.image_size || d.width != m.image_size))
    throw c.error("data.path",
                  "images of " + std::to_string(m.num_channels) + " x " + std::to_string(m.image_size) + " x " +
                      std::to_string(m.image_size) + " (model.num_channels, model.image_size)",
                  found + " in " + file);
  if (!vit && d.seq_length != m.seq_length)
    throw c.error("data.path", std::to_string(m.seq_length) + " tokens per sample (model.seq_length)", found + " in " + file);
  if (d.num_classes != m.num_labels)
    throw c.error("model.num_labels", std::to_string(d.num_classes) + ", the classes of " + file,
                  std::to_string(m.num_labels));
}

Dataset load_prepared_split(const Config& c, bool train) {
  const std::string file = prepared_file(c.data.path, train);
  Dataset d = load_prepared(file, train ? c.data.num_train_samples : c.data.num_test_samples,
                            c.model.family == ModelFamily::Bert ? c.model.vocab_size : 0);
  check_prepared(c, d, file);
  return d;
}

}  // namespace

Data load_data(const Config& c) {
  const auto& m = c.model;
  const std::uint64_t seed = c.training.seed;
  if (c.data.name == "prepared") {
    Data d{load_prepared_split(c, true), load_prepared_split(c, false)};
    if (d.test.class_names != d.train.class_names)
      throw c.error("data.path", "the same classes in both splits (prepare them together)",
                    "others in " + prepared_file(c.data.path, false));
    return d;
  }
  if (c.data.name == "fashion-mnist") {
    const std::string dir = fashion_mnist_dir(c.data.path);
    return {load_fashion_mnist(dir, true, m.image_size, c.data.num_train_samples, c.data.classes),
            load_fashion_mnist(dir, false, m.image_size, c.data.num_test_samples, c.data.classes)};
  }
  if (c.data.name == "synthetic-images")
    return {synthetic_images(c.data.num_train_samples, m.num_channels, m.image_size, m.num_labels, seed, true),
            synthetic_images(c.data.num_test_samples, m.num_channels, m.image_size, m.num_labels, seed, false)};
  return {synthetic_tokens(c.data.num_train_samples, m.seq_length, m.vocab_size, m.num_labels, seed, true),
          synthetic_tokens(c.data.num_test_samples, m.seq_length, m.vocab_size, m.num_labels, seed, false)};
}

namespace {

// A prepared image set's samples `indices` as floats, (byte / 255 - mean) /
// std per channel; a masked slot (-1) is zeros.
void normalise(const Dataset& d, const std::vector<std::int64_t>& indices, float* out) {
  const std::int64_t plane = std::int64_t{d.height} * d.width, numel = d.channels * plane;
  for (std::size_t i = 0; i < indices.size(); ++i, out += numel) {
    if (indices[i] < 0) {
      std::fill_n(out, numel, 0.0F);
      continue;
    }
    const std::uint8_t* in = d.image_bytes.data() + indices[i] * numel;
    for (int c = 0; c < d.channels; ++c) {
      const float mean = d.channel_mean[c], inv_std = 1.0F / d.channel_std[c];
      for (std::int64_t j = 0; j < plane; ++j)
        out[c * plane + j] = (static_cast<float>(in[c * plane + j]) / 255.0F - mean) * inv_std;
    }
  }
}

}  // namespace

MicroBatch make_batch(const Dataset& d, std::vector<std::int64_t> indices, bool pinned, bool with_input,
                      const Augment& augment) {
  const auto n = static_cast<std::int64_t>(indices.size());
  const std::int64_t numel = d.sample_numel();
  const auto host = [&](at::ScalarType t) { return at::TensorOptions().dtype(t).pinned_memory(pinned); };
  MicroBatch mb;
  // Empty, not zeroed: every slot is written below (a masked one with zeros).
  mb.labels = at::empty({n}, host(at::kLong));
  mb.weights = at::empty({n}, host(at::kFloat));
  auto* labels = mb.labels.data_ptr<std::int64_t>();
  auto* weights = mb.weights.data_ptr<float>();
  const auto fill = [&]<class T>(const std::vector<T>& from, T* out) {
    for (std::int64_t i = 0; i < n; ++i) {
      if (indices[i] >= 0) std::copy_n(from.data() + indices[i] * numel, numel, out + i * numel);
      else std::fill_n(out + i * numel, numel, T{0});
    }
  };
  if (with_input && d.kind == SampleKind::Image) {
    mb.input = at::empty({n, d.channels, d.height, d.width}, host(at::kFloat));
    if (d.image_bytes.empty()) fill(d.pixels, mb.input.data_ptr<float>());
    else normalise(d, indices, mb.input.data_ptr<float>());
    if (augment.any())
      for (std::int64_t i = 0; i < n; ++i)
        if (indices[i] >= 0)
          augment_image(d, draw_augment(augment.ops, augment.seed, augment.epoch, indices[i], d.height, d.width),
                        mb.input.data_ptr<float>() + i * numel);
  } else if (with_input) {
    mb.input = at::empty({n, d.seq_length}, host(at::kLong));
    fill(d.tokens, mb.input.data_ptr<std::int64_t>());
  }
  for (std::int64_t i = 0; i < n; ++i) {
    labels[i] = indices[i] >= 0 ? d.labels[indices[i]] : 0;
    weights[i] = indices[i] >= 0 ? 1.0F : 0.0F;
  }
  if (!d.lengths.empty()) {  // a masked slot counts as unpadded: attention over no key would be NaN
    mb.lengths = at::empty({n}, host(at::kLong));
    auto* lengths = mb.lengths.data_ptr<std::int64_t>();
    for (std::int64_t i = 0; i < n; ++i) lengths[i] = indices[i] >= 0 ? d.lengths[indices[i]] : d.seq_length;
  }
  mb.indices = std::move(indices);
  return mb;
}

// The copies' stream of each device and the event after its last copy.
struct BatchLoader::Ready {
  std::vector<MicroBatch> batches;
  std::vector<std::pair<at::Device, c10::Event>> copied;
};

BatchLoader::~BatchLoader() {
  if (pending_.valid()) pending_.wait();
}

void BatchLoader::request(Request r) {
  if (pending_.valid()) throw Error("batch loader: a request is already pending");
  pending_request_ = r;
  pending_ = std::async(std::launch::async, [this, r = std::move(r)] {
    auto ready = std::make_shared<Ready>();
    const bool gpu = r.input_device.is_cuda() || r.label_device.is_cuda();
    compat::use_device(r.input_device.is_cuda() ? r.input_device : r.label_device);
    for (const auto& idx : r.micro_batches) {
      Augment augment = augment_;
      augment.epoch = r.epoch;
      MicroBatch& mb = ready->batches.emplace_back(make_batch(d_, idx, gpu, r.input_needed, augment));
      if (r.cache && (mb.cached = r.cache->read_ahead(idx, r.cache_depth, gpu)).defined()) mb.cached_depth = r.cache_depth;
    }
    // Copies on a side stream of each device, non-blocking from pinned memory.
    const auto copy = [&](const at::Device& dev, const std::function<void(MicroBatch&)>& move) {
      if (!dev.is_cuda()) return;
      ready->copied.emplace_back(dev, on_side_stream(dev, SideUse::CopyToDevice, [&](const c10::Stream&) {
                                   for (MicroBatch& mb : ready->batches) move(mb);
                                 }));
    };
    if (r.input_needed || r.cache)  // else nothing goes to the first device: no event for its stream to wait on
      copy(r.input_device, [&](MicroBatch& mb) {
        if (r.input_needed) mb.input = mb.input.to(r.input_device, /*non_blocking=*/true);
        if (mb.cached.defined()) mb.cached = mb.cached.to(r.input_device, /*non_blocking=*/true);
      });
    copy(r.label_device, [&](MicroBatch& mb) {
      mb.labels = mb.labels.to(r.label_device, /*non_blocking=*/true);
      mb.weights = mb.weights.to(r.label_device, /*non_blocking=*/true);
    });
    return ready;
  });
}

void BatchLoader::settle() {
  if (pending_.valid()) pending_.wait();
}

std::vector<MicroBatch> BatchLoader::take(const Request& r) {
  const auto t0 = std::chrono::steady_clock::now();
  last_take_.prefetched = pending_.valid() && pending_request_ == r;
  if (!last_take_.prefetched) {
    if (pending_.valid()) pending_.get();  // its side-stream copies stay ordered before the blocks' reuse
    request(r);
  }
  const std::shared_ptr<Ready> ready = pending_.get();
  last_take_.wait_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const auto& [dev, event] : ready->copied) {
    std::vector<const at::Tensor*> used;
    for (const MicroBatch& mb : ready->batches)
      for (const at::Tensor* t : {&mb.input, &mb.labels, &mb.weights, &mb.cached}) used.push_back(t);
    after_side_stream(dev, event, used);
  }
  return std::move(ready->batches);
}

BatchLoader::Request batch_request(const Pipeline& pipeline, const std::vector<std::int64_t>& idx,
                                   const IterationProgram& program) {
  BatchLoader::Request r;
  std::size_t at = 0;
  for (const int n : program.micro_batches) {
    if (at + n > idx.size())
      throw Error("a batch of " + std::to_string(idx.size()) + " samples for the plan's micro-batches of " +
                  std::to_string(program.setup.batch));
    r.micro_batches.emplace_back(idx.begin() + at, idx.begin() + at + n);
    at += n;
  }
  r.input_device = pipeline.device_of_sublayer(0);
  r.label_device = pipeline.output_device();
  r.input_needed = std::none_of(program.schedule.devices.begin(), program.schedule.devices.end(), [](const auto& list) {
    return std::any_of(list.begin(), list.end(), [](const Action& a) { return a.kind == ActionKind::CacheRead; });
  });
  if (!r.input_needed && program.setup.cache_reads_ahead && pipeline.cache()) {
    r.cache = pipeline.cache();
    r.cache_depth = cache_read_depth(program.setup.cache_valid_layers, program.setup.partition.frozen_layers);
  }
  return r;
}

std::vector<std::int64_t> first_samples(const Dataset& d, int batch) {
  std::vector<std::int64_t> idx;
  for (int i = 0; i < batch; ++i) idx.push_back(i % d.size);
  return idx;
}

std::vector<at::Device> devices(const Config& c) {
  std::vector<at::Device> d;
  const int K0 = c.planner.K;
  const int gpus = c.device == DeviceKind::CUDA ? std::max<int>(1, static_cast<int>(at::getNumGPUs())) : 1;
  // Up to K0 devices; a plan moves them to its replica's block (plan_devices).
  for (int k = 0; k < K0; ++k)
    d.emplace_back(c.device == DeviceKind::CUDA ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(k % gpus))
                                                      : at::Device(at::kCPU));
  return d;
}

std::string hex(std::uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

namespace {

std::uint64_t hash_text(const std::string& s) {
  std::uint64_t h = 0x9e3779b97f4a7c15ULL;
  for (const unsigned char ch : s) h = mix64(h ^ ch);
  return h;
}

// Where a job's node-shared cache files live: the tier's folder (empty: the
// job's <out>/cache, else the system temp folder).
std::string cache_dir(const Config& c, CacheTier tier, const std::string& out_dir) {
  const ExecConfig x = read_exec_config(c);
  const std::string& dir = tier == CacheTier::HostMemory ? x.cache_memory_dir : x.cache_disk_dir;
  if (!dir.empty()) return dir;
  return out_dir.empty() ? std::filesystem::temp_directory_path().string()
                         : (std::filesystem::path(out_dir) / "cache").string();
}

// "elasticpipe-<job>-": one file per (job, node), the job named by its
// output folder (or config) so that concurrent jobs on one machine do not
// share entries.
std::string cache_file_prefix(const Config& c, const std::string& out_dir) {
  const std::string job =
      hex(hash_text(std::filesystem::absolute(out_dir.empty() ? c.source : out_dir).string())).substr(0, 12);
  return "elasticpipe-" + job + "-";
}

}  // namespace

std::string cache_path(const Config& c, const std::string& out_dir, CacheTier tier, const std::string& name) {
  const std::string dir = cache_dir(c, tier, out_dir);
  create_output_dir(dir);
  return (std::filesystem::path(dir) / (cache_file_prefix(c, out_dir) + name + ".cache")).string();
}

std::vector<std::string> cache_file_names(const Config& c, const std::string& out_dir, int rank) {
  const std::string prefix = cache_file_prefix(c, out_dir);
  std::vector<std::string> out;
  for (const CacheTier tier : {CacheTier::HostMemory, CacheTier::Disk})
    for (const std::string& name :
         {"node" + std::to_string(rank / c.cluster.gpus_per_node), "probe-" + std::to_string(rank)})
      out.push_back((std::filesystem::path(cache_dir(c, tier, out_dir)) / (prefix + name + ".cache")).string());
  return out;
}

std::vector<std::string> remove_cache_files(const Config& c, const std::string& out_dir) {
  std::vector<std::string> removed;
  const std::string prefix = cache_file_prefix(c, out_dir);
  for (const CacheTier tier : {CacheTier::HostMemory, CacheTier::Disk}) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(cache_dir(c, tier, out_dir), ec)) {
      const std::string name = entry.path().filename().string();
      if (name.starts_with(prefix) && name.ends_with(".cache") && std::filesystem::remove(entry.path(), ec))
        removed.push_back(entry.path().string());
    }
  }
  return removed;
}

}  // namespace ep::exec
