// What a training job needs before its Trainer: the checks refused before
// any work, its data, its devices, and the names of its node-shared cache
// files (which the launcher removes after a kill).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "exec/data.hpp"
#include "exec/launch.hpp"
#include "exec/pipeline.hpp"
#include "planner/cache_policy.hpp"
#include "planner/config.hpp"

namespace ep::exec {

// What this job cannot run (dataset, model, replicas for one process,
// memory, CUDA), refused with the config's file:line before any work.
void check_runnable(const Config& config, const ProcessEnv& env);

// NCCL refuses two ranks of one communicator on one device: with
// exec.device = "cuda" and `visible` GPUs per process, every lane (stage k
// of each replica) of every layout the run can reach must put its ranks on
// distinct GPUs. Refused naming the ranks, the device and the layout.
void check_gpus_not_shared(const Config& config, int visible);

// exec.device = "cuda" needs a CUDA build and a visible GPU (refused naming
// the key otherwise); returns the GPUs visible (0 on the CPU).
int check_device(const Config& config);

// The planner gives each stage and replica a GPU of its own: a node of
// cluster.gpus_per_node GPUs must have that many visible, or stages would
// share one and run at a speed no plan predicts. Refused naming the key.
void check_gpus_visible(const Config& config, int visible);

struct Data {
  Dataset train, test;
};
[[nodiscard]] Data load_data(const Config& config);

// data.augment as a training epoch draws it (data.hpp: draw_augment);
// epoch < 0: none (evaluation, probes, timing).
struct Augment {
  std::vector<Augmentation> ops;
  std::uint64_t seed = 0;
  int epoch = -1;
  [[nodiscard]] bool any() const { return !ops.empty() && epoch >= 0; }
};

// The samples of `indices` (-1: a masked slot, zeros with weight 0), each
// image transformed as `augment` draws it.
// In pinned host memory (`pinned`; CUDA builds only) for copies that do not block the host.
[[nodiscard]] MicroBatch make_batch(const Dataset& d, std::vector<std::int64_t> indices, bool pinned = false,
                                    bool with_input = true, const Augment& augment = {});

// The next iteration's micro-batches, assembled on a thread of their own
// while the current iteration runs, with the activation cache's rows where
// the plan reads them ahead. For a GPU they are assembled in pinned host
// memory and copied on a side stream, so the compute stream finds them on
// the device without waiting for the host or the copy, and the stage
// worker queuing device work does not copy rows out of the cache.
class BatchLoader {
 public:
  struct Request {
    std::vector<std::vector<std::int64_t>> micro_batches;  // dataset indices, -1 masked
    at::Device input_device = at::kCPU;  // the first stage's (the stem input)
    at::Device label_device = at::kCPU;  // the last stage's (labels and weights)
    bool input_needed = true;            // false: the activation cache stands in for the stem
    // Where the plan reads the cache ahead (cache_reads_ahead): its rows at
    // this depth, read with the batch when all are there (MicroBatch::cached).
    ActivationCache* cache = nullptr;
    int cache_depth = -1;
    int epoch = -1;  // the training epoch the batch belongs to: what augmentation draws from (-1: none)
    friend bool operator==(const Request&, const Request&) = default;
  };
  // `augment`: the transforms and seed of data.augment (its epoch is each request's).
  explicit BatchLoader(const Dataset& d, Augment augment = {}) : d_(d), augment_(std::move(augment)) {}
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // Starts assembling `r` (at most one request is pending).
  void request(Request r);
  // Returns once the pending request (if any) is assembled, keeping it: its
  // cache read done before the cache goes.
  void settle();
  // The batches of `r`, ordered before the devices' current streams' next
  // work: the pending request's when it is `r`; otherwise (a guess that the
  // plan proved wrong, e.g. the next epoch's first batch before a freeze
  // step moved the stages) the pending one is dropped and `r` assembled now.
  std::vector<MicroBatch> take(const Request& r);
  // How the last take() went: its batches assembled ahead (the pending
  // request was its own) or now, and the host's wait for them.
  struct Taken {
    bool prefetched = false;
    double wait_s = 0;
  };
  [[nodiscard]] const Taken& last_take() const { return last_take_; }

  struct Ready;

 private:
  const Dataset& d_;
  Augment augment_;
  Request pending_request_;
  std::future<std::shared_ptr<Ready>> pending_;
  Taken last_take_;
};

// The samples `idx` as `program` reads them on `pipeline`: cut into its
// micro-batches, the stem input on the first stage's device (unless the
// cache stands in for it), labels and weights on the last stage's.
// Throws when `idx` holds fewer samples than the micro-batches take.
[[nodiscard]] BatchLoader::Request batch_request(const Pipeline& pipeline, const std::vector<std::int64_t>& idx,
                                                 const IterationProgram& program);

// `batch` samples of `d` from index 0 on (wrapping), for timing.
[[nodiscard]] std::vector<std::int64_t> first_samples(const Dataset& d, int batch);

// The first plan's devices (K0 of them); a plan moves them to its replica's GPUs.
[[nodiscard]] std::vector<at::Device> devices(const Config& config);

// The node-shared cache file `name` of the job writing to `out_dir`, in the
// tier's folder (created when missing).
[[nodiscard]] std::string cache_path(const Config& config, const std::string& out_dir, CacheTier tier,
                                     const std::string& name);

// "0123456789abcdef": 16 hex digits.
[[nodiscard]] std::string hex(std::uint64_t v);

}  // namespace ep::exec
