// The stage runtime: carries out one iteration of a lowered planner Schedule
// with real tensors. One worker thread per pipeline device runs that
// device's action list in order; stages exchange activations and gradients
// through a mailbox keyed by (kind, stage, micro-batch), so a receive blocks
// until its send has happened, exactly the dependencies the planner's
// `simulate` assumes. Each stage's forward keeps its input (a fresh autograd
// leaf) and output; its backward runs autograd on that sub-graph only and
// hands the input's gradient to the previous stage. The frozen prefix runs
// without autograd; a layer frozen inside runs with it, for its input's
// gradient, its weights taking none (no optimizer state, no all-reduce).
// A stage with nothing to train and nothing trainable before it does no
// backward and sends no gradient (an empty message).
// The pipeline decides nothing: partition, K, v, M and the order of work
// all come from the Plan and its Schedule.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "exec/model.hpp"
#include "exec/optimizer.hpp"
#include "planner/iteration.hpp"
#include "planner/partition.hpp"
#include "planner/schedule.hpp"

namespace c10 {
class Event;  // c10/core/Event.h
}  // namespace c10

namespace ep::exec::compat {
class DeviceMarks;  // exec/torch_compat.hpp
}  // namespace ep::exec::compat

namespace ep::exec {

class ActivationCache;

// Data-parallel gradient reduction across pipeline replicas (exec/dist.hpp
// on c10d). The pipeline launches a bucket's sum all-reduce at its
// AllReduce action, so it overlaps the device's remaining backwards, and
// waits for the stage's buckets at its OptimizerStep.
class PendingReduce {
 public:
  virtual ~PendingReduce() = default;
  // Gloo: blocks until done; throws ep::Error naming the rank and the
  // operation (timeout or a failed peer). NCCL: the current stream's next
  // work comes after the collective; the host does not wait, so a timeout
  // or a lost peer is ended by c10d's watchdog, which aborts the process
  // (the launcher reports the rank and the signal).
  virtual void wait() = 0;
  // When the collective finished (valid after wait()): on the host's clock,
  // when c10d completed it, which for NCCL is when it was queued.
  [[nodiscard]] virtual std::chrono::steady_clock::time_point completed_at() const = 0;
  // On a GPU, an event the device passes once the collective has run
  // (valid after wait()); null elsewhere.
  [[nodiscard]] virtual std::shared_ptr<c10::Event> device_end() const { return nullptr; }
};

class GradientReducer {
 public:
  virtual ~GradientReducer() = default;
  // Sum all-reduce of the 1-D tensor `flat` in place, on lane `lane` (the
  // pipeline device issuing it). `what` names it in errors.
  virtual std::shared_ptr<PendingReduce> allreduce(int lane, at::Tensor flat, const std::string& what) = 0;
};

struct MicroBatch {
  MicroBatch() = default;
  MicroBatch(at::Tensor input, at::Tensor labels, at::Tensor weights, std::vector<std::int64_t> indices = {})
      : input(std::move(input)), labels(std::move(labels)), weights(std::move(weights)), indices(std::move(indices)) {}
  at::Tensor input;    // stem input, CPU; moved to the first device by the pipeline
  at::Tensor labels;   // int64 [n]
  at::Tensor weights;  // float [n]: 1 for a real sample, 0 for a masked sampler slot
  std::vector<std::int64_t> indices;  // dataset index per sample, -1 when masked
  // Token inputs with padding: int64 [n], each sample's real tokens (CPU;
  // every stage takes it to its device); undefined where none is padded.
  at::Tensor lengths;
  // The activation cache's rows of `indices` at depth `cached_depth`, read
  // ahead with the batch onto the first device (ActivationCache::
  // read_ahead); undefined where they were not, and the CacheRead reads them.
  at::Tensor cached;
  int cached_depth = -1;
};

// The depth a CacheRead reads: the entries' valid layers where the program
// advances them (cache_valid_layers > 0), else its frozen layers.
[[nodiscard]] inline int cache_read_depth(int cache_valid_layers, int frozen_layers) {
  return cache_valid_layers > 0 ? cache_valid_layers : frozen_layers;
}

struct ActionRecord {
  Action action;
  int device = 0;
  double start_s = 0;  // seconds since the run's origin
  double end_s = 0;
};

struct IterationResult {
  double loss = 0;           // Σ over micro-batches: the batch's mean loss
  std::int64_t correct = 0;  // real samples classified right
  // Per Transformer layer, ‖g‖² over its attention and MLP parameters,
  // measured at each stage's OptimizerStep (before the update); empty when
  // the schedule has no OptimizerStep.
  std::vector<double> layer_grad_sq;
  std::vector<ActionRecord> records;  // when traced
  // recomputed[stage][m]: micro-batch m reran the stage's forward in its
  // backward (IterationProgram::recomputes).
  std::vector<std::vector<bool>> recomputed;
};

// An iteration whose device work may still be running: get() reads its
// losses, hits and gradient norms on the host, waiting for them then, so
// the host can queue the next iteration first.
class IterationFuture {
 public:
  [[nodiscard]] IterationResult get();

 private:
  friend class Pipeline;
  struct Gathered;
  // An AllReduce record (its index among its device's records) and the
  // event at its collective's end.
  using CollectiveEnd = std::pair<std::size_t, std::shared_ptr<c10::Event>>;
  struct Traced {  // a GPU's traced actions, their times read by get()
    std::shared_ptr<compat::DeviceMarks> marks;
    std::size_t first_record = 0;  // its first action in result_.records
    std::chrono::steady_clock::time_point origin;
    std::vector<CollectiveEnd> collective_ends;
  };
  IterationResult result_;  // what the host already holds (records, recomputation)
  std::shared_ptr<Gathered> gathered_;
  std::vector<Traced> traced_;
};

// Threads and recomputation come with each program (IterationProgram).
struct PipelineOptions {
  std::vector<at::Device> devices;  // K workers' devices
  bool bf16_autocast = false;
};

class Pipeline {
 public:
  Pipeline(Model& model, Optimizer& optimizer, PipelineOptions options);
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // Places every sublayer per `partition` (stage s on device s % K, F_frozen
  // on device 0), marks the frozen prefix and the layers frozen inside
  // untrainable and takes them out of the optimizer, adds the trained
  // parameters (their state, if any, is kept and moved along). Weights are
  // moved, never re-initialised.
  void configure(const Partition& partition, int K, int v);
  [[nodiscard]] const Partition& partition() const { return partition_; }
  // Device and trainable flag of each sublayer as configured.
  [[nodiscard]] at::Device device_of_sublayer(int sublayer) const;
  // The last stage's device: where the loss reads labels and weights.
  [[nodiscard]] at::Device output_device() const;

  // The activation cache CacheRead/CacheWrite use, and the frozen depth (in
  // layers) its entries hold before this iteration (Advance reads those).
  void set_cache(ActivationCache* cache) { cache_ = cache; }
  [[nodiscard]] ActivationCache* cache() const { return cache_; }
  // All-reduces gradients at AllReduce actions (null: one replica, and a
  // schedule with AllReduce actions is refused).
  void set_reducer(GradientReducer* reducer) { reducer_ = reducer; }
  // The devices stage workers 0..K-1 use from the next configure() on
  // (AutoDP moves a process's pipeline to its replica's block of GPUs).
  void set_devices(std::vector<at::Device> devices);
  // Runs `program` (lowered by the planner) on `batches` (schedule.M of
  // them): its schedule's actions, its recomputation, its worker threads,
  // its cache depth (setup.cache_valid_layers). `real_samples` is the whole
  // batch's count of real samples (the loss denominator). Gradients are
  // zeroed first; an OptimizerStep in the schedule applies `lr`. Times are
  // recorded when `origin` is given.
  IterationResult run(const IterationProgram& program, std::span<const MicroBatch> batches, double real_samples,
                      double lr, std::optional<std::chrono::steady_clock::time_point> origin = {});
  // run() without waiting for the devices: returns once the iteration's
  // work is queued (on a GPU; on the CPU it has run). `batches` may be
  // released on return.
  IterationFuture launch(const IterationProgram& program, std::span<const MicroBatch> batches, double real_samples,
                         double lr, std::optional<std::chrono::steady_clock::time_point> origin = {});

  // What the first optimizer step of `program` would do once, done now on
  // stage 0's worker: the trained parameters' optimizer state made, and the
  // step (with its gradients' norms where the program computes them) run on
  // scratch parameters per device, loading its kernels. Updates nothing: a
  // run's start (run_start_iterations) calls it.
  void prepare_step(const IterationProgram& program);

  // The seed of the trained sublayers' dropout masks (dropout_keys of each
  // sample's index) from the next iteration on; the trainer sets one per
  // epoch. Frozen sublayers and infer() run without dropout.
  void set_dropout_seed(std::uint64_t seed) { dropout_seed_ = seed; }
  // Forward only, no autograd, all sublayers in order on their devices: the
  // logits of `input` (evaluation; `lengths` as MicroBatch's), on the
  // calling thread: inside on_worker.
  [[nodiscard]] at::Tensor infer(const at::Tensor& input, const at::Tensor& lengths = {});

  // Runs `task` on stage 0's worker thread, with `threads` intra-op threads
  // and the worker's autocast, between iterations; returns when it is done
  // and rethrows what it threw. Model work outside an iteration (evaluation,
  // the cache probe and fills) goes here: a second thread running torch's
  // multi-threaded operators keeps a second OpenMP team, and with more
  // OpenMP threads than cores libgomp stops spinning between parallel
  // regions, so every later region of every worker waits for its team to
  // wake (on 2 cores, a step's optimizer went from 0.7 to 9 ms).
  void on_worker(int threads, const std::function<void()>& task);

 private:
  struct Job;
  struct DeviceRun;  // one device's actions of one iteration, a handler per kind
  void worker_main(int device);
  void run_device(int device, Job& job);
  // Hands `job` to the workers and waits for the first `workers` of them.
  void post(Job& job, int workers);

  Model& model_;
  Optimizer& optimizer_;
  PipelineOptions options_;
  Partition partition_;
  int K_ = 1;
  int v_ = 1;
  ActivationCache* cache_ = nullptr;
  GradientReducer* reducer_ = nullptr;
  std::uint64_t dropout_seed_ = 0;

  // Worker pool: one persistent thread per device.
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable cv_;
  Job* job_ = nullptr;
  std::uint64_t generation_ = 0;
  int finished_ = 0;
  bool stop_ = false;
};

}  // namespace ep::exec
