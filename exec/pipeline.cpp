#include "exec/pipeline.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

#include "exec/cache.hpp"
#include "exec/torch_compat.hpp"
#include "planner/error.hpp"

namespace ep::exec {
namespace {

// What one stage keeps of a micro-batch between its forward and backward.
struct Saved {
  at::Tensor input;   // the autograd leaf the stage's active sublayers start from
  at::Tensor output;  // active sublayers' output (empty when recomputed)
  at::Tensor loss;    // last stage only
};

enum class Message : unsigned char { Activation, Gradient, FrozenOutput };
using Key = std::tuple<Message, int, int>;  // (what, receiving stage, micro-batch)

// Hand-off between stages, across or within devices. take() blocks until
// the entry is there; abort() wakes everyone when a worker fails, so a
// failure never hangs the pipeline.
class Mailbox {
 public:
  void put(const Key& key, at::Tensor t) {
    {
      std::lock_guard lock(mutex_);
      box_[key] = std::move(t);
    }
    cv_.notify_all();
  }
  at::Tensor take(const Key& key) {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return aborted_ || box_.count(key) > 0; });
    if (aborted_) throw Error("pipeline aborted by a failing worker");
    at::Tensor t = std::move(box_.at(key));
    box_.erase(key);
    return t;
  }
  void wait(const Key& key) {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return aborted_ || box_.count(key) > 0; });
    if (aborted_) throw Error("pipeline aborted by a failing worker");
  }
  void abort() {
    {
      std::lock_guard lock(mutex_);
      aborted_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<Key, at::Tensor> box_;
  bool aborted_ = false;
};

double seconds_since(std::chrono::steady_clock::time_point origin) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - origin).count();
}

}  // namespace

struct Pipeline::Job {
  const IterationProgram* program = nullptr;
  const Schedule* schedule = nullptr;  // the program's
  std::span<const MicroBatch> batches;
  double real_samples = 1;
  double lr = 0;
  int cache_valid_layers = -1;
  std::optional<std::chrono::steady_clock::time_point> origin;
  Mailbox mailbox;
  std::vector<std::map<int, Saved>> saved;       // per stage, per micro-batch
  std::vector<at::Tensor> loss, correct;         // per micro-batch, on the last device
  // Per stage, at its OptimizerStep: ‖g‖² of each parameter with a
  // gradient, and each one's Transformer layer (-1: stem or head).
  std::vector<at::Tensor> stage_grad_sq;
  std::vector<std::vector<int>> stage_grad_layer;
  std::vector<std::vector<ActionRecord>> records;  // per device
  // Per device on a GPU, a traced iteration's events around each action
  // (two per action, in records' order), read when the host reads the iteration.
  std::vector<std::shared_ptr<compat::DeviceMarks>> marks;
  std::vector<std::vector<IterationFuture::CollectiveEnd>> collective_ends;  // per device on a GPU, traced
  std::vector<std::vector<char>> recomputed;       // per stage, per micro-batch (each written by one worker)
  // Per stage: its launched bucket all-reduces, the flat buffers and where
  // their AllReduce records sit (end time filled in at completion).
  struct Bucket {
    std::shared_ptr<PendingReduce> pending;
    at::Tensor flat;
    std::vector<at::Tensor> grads;
    std::size_t record = 0;
  };
  std::vector<std::vector<Bucket>> buckets;
  std::vector<int> bucket_count;  // per stage: its AllReduce actions
  // Instead of an iteration: on_worker's task, for stage 0's worker.
  const std::function<void()>* task = nullptr;
  int task_threads = 0;
  std::exception_ptr error;
};

Pipeline::Pipeline(Model& model, Optimizer& optimizer, PipelineOptions options)
    : model_(model), optimizer_(optimizer), options_(std::move(options)) {
  if (options_.devices.empty()) throw Error("pipeline: no devices");
  for (int d = 0; d < static_cast<int>(options_.devices.size()); ++d)
    workers_.emplace_back([this, d] { worker_main(d); });
}

Pipeline::~Pipeline() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void Pipeline::configure(const Partition& partition, int K, int v) {
  if (K > static_cast<int>(options_.devices.size()))
    throw Error("pipeline: the plan needs K = " + std::to_string(K) + " devices, " +
                std::to_string(options_.devices.size()) + " are configured");
  if (partition.K() != K * v) throw Error("pipeline: partition has " + std::to_string(partition.K()) +
                                          " stages, expected K*v = " + std::to_string(K * v));
  partition_ = partition;
  K_ = K;
  v_ = v;
  for (int i = 0; i < model_.num_sublayers(); ++i) {
    Sublayer& sub = model_.sublayer(i);
    const at::Device device = device_of_sublayer(i);
    const bool trainable = partition.trains(i);  // not the prefix, nor a layer frozen inside
    sub.to(device);
    sub.set_requires_grad(trainable);
    for (const auto& p : sub.params()) {
      if (trainable) {
        optimizer_.add(p.name);
        optimizer_.to(p.name, device);
      } else {
        optimizer_.remove(p.name);
      }
    }
  }
}

void Pipeline::set_devices(std::vector<at::Device> devices) {
  if (devices.size() != options_.devices.size())
    throw Error("pipeline: " + std::to_string(devices.size()) + " devices given, the pipeline has " +
                std::to_string(options_.devices.size()) + " workers");
  options_.devices = std::move(devices);
}

at::Device Pipeline::device_of_sublayer(int sublayer) const {
  if (sublayer < partition_.bounds.front()) return options_.devices[0];  // F_frozen
  for (int s = 0; s < partition_.K(); ++s)
    if (sublayer < partition_.bounds[s + 1]) return options_.devices[s % K_];
  throw Error("pipeline: sublayer " + std::to_string(sublayer) + " is in no stage");
}

at::Device Pipeline::output_device() const { return device_of_sublayer(model_.num_sublayers() - 1); }

IterationResult Pipeline::run(const IterationProgram& program, std::span<const MicroBatch> batches,
                              double real_samples, double lr,
                              std::optional<std::chrono::steady_clock::time_point> origin) {
  return launch(program, batches, real_samples, lr, origin).get();
}

// Per device, the iteration's scalars in one tensor, copied to the host
// without waiting; the event after the copy says when they are there.
struct IterationFuture::Gathered {
  struct Part {
    at::Tensor host;
    std::optional<c10::Event> copied;
  };
  using DeviceKey = std::pair<int, int>;
  using Place = std::pair<DeviceKey, std::int64_t>;  // a value's device and offset there
  std::map<DeviceKey, Part> parts;
  std::vector<std::optional<Place>> loss, correct;  // per micro-batch
  std::vector<std::optional<Place>> stage_sq;       // per stage: its first ‖g‖²
  std::vector<std::vector<int>> stage_layer;        // per stage: each ‖g‖²'s layer
  int num_layers = 0;
};

IterationFuture Pipeline::launch(const IterationProgram& program, std::span<const MicroBatch> batches,
                                 double real_samples, double lr,
                                 std::optional<std::chrono::steady_clock::time_point> origin) {
  const Schedule& schedule = program.schedule;
  if (schedule.K != K_ || schedule.v != v_)
    throw Error("pipeline: schedule for K=" + std::to_string(schedule.K) + ", v=" + std::to_string(schedule.v) +
                ", configured for K=" + std::to_string(K_) + ", v=" + std::to_string(v_));
  if (static_cast<int>(batches.size()) != schedule.M)
    throw Error("pipeline: " + std::to_string(batches.size()) + " micro-batches for M=" + std::to_string(schedule.M));
  for (const auto& p : model_.named_params()) p.tensor.mutable_grad().reset();

  Job job;
  job.program = &program;
  job.schedule = &schedule;
  job.batches = batches;
  job.real_samples = real_samples;
  job.lr = lr;
  job.cache_valid_layers = program.setup.cache_valid_layers;
  job.origin = origin;
  job.saved.resize(schedule.num_stages());
  job.loss.resize(schedule.M);
  job.correct.resize(schedule.M);
  job.stage_grad_sq.resize(schedule.num_stages());
  job.stage_grad_layer.resize(schedule.num_stages());
  job.records.resize(schedule.K);
  job.marks.resize(schedule.K);
  job.collective_ends.resize(schedule.K);
  job.recomputed.assign(schedule.num_stages(), std::vector<char>(schedule.M, 0));
  job.buckets.resize(schedule.num_stages());
  job.bucket_count.assign(schedule.num_stages(), 0);
  for (const auto& list : schedule.devices)
    for (const Action& a : list)
      if (a.kind == ActionKind::AllReduce) ++job.bucket_count[a.stage];
  post(job, schedule.K);
  if (job.error) std::rethrow_exception(job.error);

  IterationFuture future;
  IterationResult& result = future.result_;
  for (const auto& stage : job.recomputed) result.recomputed.emplace_back(stage.begin(), stage.end());
  for (std::size_t d = 0; d < job.records.size(); ++d) {
    if (job.marks[d])
      future.traced_.push_back({job.marks[d], result.records.size(), *job.origin, std::move(job.collective_ends[d])});
    result.records.insert(result.records.end(), job.records[d].begin(), job.records[d].end());
  }
  // What the host reads of the iteration, in one copy per device.
  using Gathered = IterationFuture::Gathered;
  auto g = std::make_shared<Gathered>();
  std::map<Gathered::DeviceKey, std::pair<std::vector<at::Tensor>, std::int64_t>> lists;  // values, their count
  const auto place = [&](const at::Tensor& t) -> std::optional<Gathered::Place> {
    if (!t.defined()) return std::nullopt;
    const Gathered::DeviceKey key{static_cast<int>(t.device().type()), static_cast<int>(t.device().index())};
    auto& [list, count] = lists[key];
    list.push_back(t.to(at::kDouble).reshape({-1}));
    count += list.back().numel();
    return Gathered::Place{key, count - list.back().numel()};
  };
  for (int m = 0; m < schedule.M; ++m) {
    g->loss.push_back(place(job.loss[m]));
    g->correct.push_back(place(job.correct[m]));
  }
  g->num_layers = model_.spec().num_layers();
  for (int s = 0; s < schedule.num_stages(); ++s) g->stage_sq.push_back(place(job.stage_grad_sq[s]));
  g->stage_layer = std::move(job.stage_grad_layer);
  for (auto& [key, list] : lists) {
    Gathered::Part& part = g->parts[key];
    const at::Tensor values = at::cat(list.first);
    part.host = values.to(at::kCPU, /*non_blocking=*/values.is_cuda());
    if (values.is_cuda()) {
      part.copied.emplace(values.device().type());
      part.copied->record(c10::impl::getDeviceGuardImpl(values.device().type())->getStream(values.device()));
    }
  }
  future.gathered_ = std::move(g);
  return future;
}

IterationResult IterationFuture::get() {
  if (!gathered_) throw Error("pipeline: an iteration's results are read once");
  const std::shared_ptr<Gathered> g = std::move(gathered_);
  for (auto& [key, part] : g->parts)
    if (part.copied) compat::wait(*part.copied);
  const auto value = [&](const Gathered::Place& at, std::int64_t i = 0) {
    return g->parts.at(at.first).host.data_ptr<double>()[at.second + i];
  };
  IterationResult result = std::move(result_);
  // A GPU's traced actions: their events' host times, now that they have run.
  for (const Traced& t : traced_) {
    const std::vector<compat::DeviceMarks::TimePoint> times = t.marks->times();
    for (std::size_t i = 0; 2 * i + 1 < times.size(); ++i) {
      ActionRecord& r = result.records.at(t.first_record + i);
      r.start_s = std::chrono::duration<double>(times[2 * i] - t.origin).count();
      // A collective runs on its own stream: its end is the event after it
      // (below), set by the OptimizerStep that waited for it.
      if (r.action.kind != ActionKind::AllReduce) r.end_s = std::chrono::duration<double>(times[2 * i + 1] - t.origin).count();
    }
    for (const auto& [i, end] : t.collective_ends)
      result.records.at(t.first_record + i).end_s = std::chrono::duration<double>(t.marks->time_of(*end) - t.origin).count();
  }
  traced_.clear();
  for (std::size_t m = 0; m < g->loss.size(); ++m) {
    if (g->loss[m]) result.loss += value(*g->loss[m]);
    if (g->correct[m]) result.correct += std::llround(value(*g->correct[m]));
  }
  // Per Transformer layer, when some stage stepped.
  if (std::any_of(g->stage_sq.begin(), g->stage_sq.end(), [](const auto& v) { return v.has_value(); })) {
    result.layer_grad_sq.assign(g->num_layers, 0.0);
    for (std::size_t s = 0; s < g->stage_sq.size(); ++s)
      for (std::size_t i = 0; g->stage_sq[s] && i < g->stage_layer[s].size(); ++i)
        if (g->stage_layer[s][i] >= 0)
          result.layer_grad_sq[g->stage_layer[s][i]] += value(*g->stage_sq[s], static_cast<std::int64_t>(i));
  }
  return result;
}

void Pipeline::post(Job& job, int workers) {
  std::unique_lock lock(mutex_);
  job_ = &job;
  finished_ = 0;
  ++generation_;
  cv_.notify_all();
  cv_.wait(lock, [&] { return finished_ == workers; });
  job_ = nullptr;
}

void Pipeline::on_worker(int threads, const std::function<void()>& task) {
  Job job;
  job.task = &task;
  job.task_threads = threads;
  post(job, 1);
  if (job.error) std::rethrow_exception(job.error);
}

void Pipeline::prepare_step(const IterationProgram& program) {
  on_worker(program.threads.worker, [&] {
    std::vector<NamedTensor> trained;
    std::set<std::tuple<int, int, int>> kinds;  // device type, index, dtype
    for (int i = partition_.frozen_end; i < model_.num_sublayers(); ++i) {
      if (!partition_.trains(i)) continue;
      for (const auto& p : model_.sublayer(i).params()) {
        trained.push_back(p);
        const at::Tensor& t = p.tensor;
        if (kinds.insert({static_cast<int>(t.device().type()), static_cast<int>(t.device().index()),
                          static_cast<int>(t.scalar_type())}).second)
          optimizer_.warm_up(t.options(), program.setup.grad_norms);
      }
    }
    optimizer_.make_state(trained);
  });
}

void Pipeline::worker_main(int device) {
  int threads = 0;
  at::Device current = at::kCPU;  // the GPU made current on this thread, once per move
  compat::set_autocast(options_.devices[device].type(), options_.bf16_autocast, at::kBFloat16);
  std::uint64_t seen = 0;
  while (true) {
    Job* job = nullptr;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || (job_ != nullptr && generation_ != seen); });
      if (stop_) return;
      seen = generation_;
      // A device outside this schedule's K (any but stage 0's for a task)
      // must not touch the job at all: run() returns (and the job dies)
      // once the devices taking part are done.
      if (device >= (job_->task ? 1 : job_->schedule->K)) continue;
      job = job_;
    }
    // The program's thread count (with fewer devices, each worker may use more cores).
    const int want = job->task ? job->task_threads : job->program->threads.worker;
    if (want > 0 && want != threads) compat::set_thread_count(threads = want);
    if (options_.devices[device] != current) compat::use_device(current = options_.devices[device]);  // AutoDP moves it
    try {
      if (job->task) (*job->task)();
      else run_device(device, *job);
      // Autocast keeps one bf16 copy per trained weight until its cache is
      // cleared: cleared after each iteration, as leaving PyTorch's autocast
      // region does, or the next iteration would compute with the weights
      // before this iteration's optimizer step.
      if (options_.bf16_autocast) at::autocast::clear_cache();
    } catch (...) {
      {
        std::lock_guard lock(mutex_);
        if (!job->error) job->error = std::current_exception();
      }
      job->mailbox.abort();
    }
    {
      std::lock_guard lock(mutex_);
      ++finished_;
    }
    cv_.notify_all();
  }
}

// One device's part of one iteration: its action list, one handler per
// action kind. Device 0 also keeps F_frozen's inputs (advance) and outputs
// between the frozen forward and the cache write.
struct Pipeline::DeviceRun {
  Pipeline& pipe;
  Job& job;
  const int device;
  const Schedule& schedule = *job.schedule;
  const Partition& part = pipe.partition_;
  const int stages = schedule.num_stages();
  const at::Device dev = pipe.options_.devices[device];
  const bool has_frozen_model = part.bounds.front() > 0;  // F_frozen on device 0
  std::map<int, at::Tensor> frozen_in, frozen_out;         // per micro-batch
  std::map<int, at::Tensor> lengths_here;                  // per micro-batch, on this device
  std::map<int, at::Tensor> keys_here;                     // dropout keys per micro-batch, on this device

  DeviceRun(Pipeline& p, Job& j, int d) : pipe(p), job(j), device(d) {}

  // Micro-batch m's real tokens per sample on this device (undefined: no
  // padding). From pinned memory on a GPU: queued, the host goes on (torch's
  // host allocator keeps the block until the copy has run).
  const at::Tensor& lengths(int m) {
    const auto [it, fresh] = lengths_here.try_emplace(m);
    if (fresh && job.batches[m].lengths.defined()) it->second = job.batches[m].lengths.to(dev, /*non_blocking=*/true);
    return it->second;
  }

  // Micro-batch m's dropout keys on this device (undefined: the model has
  // no dropout), from pinned memory on a GPU as lengths().
  const at::Tensor& keys(int m) {
    const auto [it, fresh] = keys_here.try_emplace(m);
    if (fresh && pipe.model_.dropout().any())
      it->second = dropout_keys(pipe.dropout_seed_, job.batches[m].indices, dev.is_cuda()).to(dev, /*non_blocking=*/true);
    return it->second;
  }

  // The program's recomputation, per micro-batch.
  [[nodiscard]] bool recompute(int m) const { return job.program->recomputes(m); }
  // Stage s's own frozen sublayers (no AutoPipe: the prefix stays in place).
  [[nodiscard]] SublayerRange inner_frozen(int s) const {
    return s == 0 && has_frozen_model ? SublayerRange{0, 0} : part.hosted_frozen(s);
  }
  // Active sublayers exist before stage s: its input needs a gradient.
  [[nodiscard]] bool needs_input_grad(int s) const { return s > 0 && part.bounds[s] > part.frozen_end; }
  [[nodiscard]] bool advancing() const { return job.cache_valid_layers > 0; }

  at::Tensor active_forward(int s, int m, Saved& saved) {
    at::Tensor out = pipe.model_.forward(part.active(s), saved.input, lengths(m), keys(m));
    if (s == stages - 1) {
      const MicroBatch& mb = job.batches[m];
      const at::Tensor labels = mb.labels.to(dev), weights = mb.weights.to(dev);
      saved.loss = weighted_cross_entropy(out, labels, weights, job.real_samples);
      if (!job.loss[m].defined()) {  // recorded once, at the forward
        job.loss[m] = saved.loss.detach();
        job.correct[m] = ((out.argmax(-1) == labels) * (weights > 0)).sum();
      }
    }
    return out;
  }

  std::vector<NamedTensor> stage_params(int s) const {
    std::vector<NamedTensor> ps;
    for (int i = part.active(s).first; i < part.active(s).last; ++i)
      if (part.trains(i))
        for (const auto& p : pipe.model_.sublayer(i).params()) ps.push_back(p);
    return ps;
  }

  void cache_read(const Action& a) {
    if (!pipe.cache_) throw Error("pipeline: the schedule reads the activation cache, none is set");
    const int m = a.microbatch;
    const MicroBatch& mb = job.batches[m];
    const int depth = cache_read_depth(job.cache_valid_layers, part.frozen_layers);
    at::Tensor t = mb.cached.defined() && mb.cached_depth == depth ? mb.cached.to(dev)
                                                                   : pipe.cache_->read(mb.indices, depth, dev);
    if (advancing()) frozen_in[m] = t;
    else job.mailbox.put({Message::FrozenOutput, 0, m}, t);
  }

  void frozen_forward(const Action& a) {
    const int m = a.microbatch;
    c10::NoGradGuard no_grad;
    at::Tensor in = advancing() ? frozen_in.at(m) : job.batches[m].input.to(dev);
    const SublayerRange run{advancing() ? ModelSpec::first_sublayer_of_layer(job.cache_valid_layers) : 0,
                            part.bounds.front()};
    at::Tensor out = pipe.model_.forward(run, in, lengths(m));
    frozen_in.erase(m);
    frozen_out[m] = out;
    job.mailbox.put({Message::FrozenOutput, 0, m}, out);
  }

  void cache_write(const Action& a) {
    if (!pipe.cache_) throw Error("pipeline: the schedule writes the activation cache, none is set");
    // Stored behind the worker where the plan says so (cache_writes_behind).
    pipe.cache_->write(job.batches[a.microbatch].indices, frozen_out.at(a.microbatch), part.frozen_layers,
                       job.program->setup.cache_writes_behind);
    frozen_out.erase(a.microbatch);
  }

  void forward(const Action& a) {
    const int s = a.stage, m = a.microbatch;
    at::Tensor x;
    if (s > 0) x = job.mailbox.take({Message::Activation, s, m});
    else if (has_frozen_model) x = job.mailbox.take({Message::FrozenOutput, 0, m});
    else x = job.batches[m].input.to(dev);
    const SublayerRange inner = inner_frozen(s);
    if (!inner.empty()) {
      c10::NoGradGuard no_grad;
      x = pipe.model_.forward(inner, x, lengths(m));
    }
    Saved& saved = job.saved[s][m];
    saved.input = x.detach().requires_grad_(needs_input_grad(s));
    at::Tensor out;
    if (recompute(m)) {
      c10::NoGradGuard no_grad;
      out = active_forward(s, m, saved);
    } else {
      out = active_forward(s, m, saved);
      saved.output = out;
    }
    if (s + 1 < stages) {
      // Same device: hand over now; else the SendAct carries it.
      if (schedule.device_of(s + 1) == device) job.mailbox.put({Message::Activation, s + 1, m}, out.detach());
      else saved.output = saved.output.defined() ? saved.output : out;
    }
  }

  void send_act(const Action& a) {
    const int s = a.stage, m = a.microbatch;
    const at::Device peer = pipe.options_.devices[a.peer_device];
    job.mailbox.put({Message::Activation, s + 1, m}, job.saved[s].at(m).output.detach().to(peer));
    if (recompute(m)) job.saved[s].at(m).output = at::Tensor();
  }

  void backward(const Action& a) {
    const int s = a.stage, m = a.microbatch;
    Saved saved = std::move(job.saved[s].at(m));
    job.saved[s].erase(m);
    const bool trains = !part.active(s).empty();
    at::Tensor grad_out;
    if (s + 1 < stages) grad_out = job.mailbox.take({Message::Gradient, s, m});
    at::Tensor grad_in;
    if (trains || needs_input_grad(s)) {
      if (recompute(m)) {
        saved.output = active_forward(s, m, saved);
        job.recomputed[s][m] = 1;
      }
      if (s == stages - 1) torch::autograd::backward({saved.loss});
      else if (grad_out.defined()) torch::autograd::backward({saved.output}, {grad_out});
      if (needs_input_grad(s)) grad_in = saved.input.grad();
    }
    if (s > 0) {
      if (schedule.device_of(s - 1) == device) job.mailbox.put({Message::Gradient, s - 1, m}, grad_in);
      else job.saved[s][m] = Saved{grad_in, {}, {}};  // kept for the SendGrad
    }
  }

  void send_grad(const Action& a) {
    const int s = a.stage, m = a.microbatch;
    const at::Device peer = pipe.options_.devices[a.peer_device];
    at::Tensor g = std::move(job.saved[s].at(m).input);
    job.saved[s].erase(m);
    job.mailbox.put({Message::Gradient, s - 1, m}, g.defined() ? g.to(peer) : g);
  }

  void optimizer_step(const Action& a) {
    const int s = a.stage;
    const std::vector<NamedTensor> params = stage_params(s);
    for (auto& b : job.buckets[s]) {  // the replicas' summed gradients, back in place
      b.pending->wait();
      if (job.origin) {
        if (std::shared_ptr<c10::Event> end = b.pending->device_end()) job.collective_ends[device].emplace_back(b.record, end);
        else job.records[device][b.record].end_s = std::chrono::duration<double>(b.pending->completed_at() - *job.origin).count();
      }
      std::int64_t at = 0;
      for (auto& g : b.grads) {
        const std::int64_t n = g.numel();
        g.copy_(b.flat.slice(0, at, at + n).view_as(g));
        at += n;
      }
    }
    job.buckets[s].clear();
    // ‖g‖² per parameter, where the freeze policy reads them; the host sums
    // them per layer when it reads the iteration.
    if (job.program->setup.grad_norms) {
      std::vector<at::Tensor> grads;
      std::vector<int>& layer = job.stage_grad_layer[s];
      for (int i = part.active(s).first; i < part.active(s).last; ++i) {
        const ep::Sublayer& sub = pipe.model_.spec().sublayers[i];
        const bool transformer = sub.kind == SublayerKind::Attention || sub.kind == SublayerKind::Mlp;
        for (const auto& p : pipe.model_.sublayer(i).params())
          if (p.tensor.grad().defined()) grads.push_back(p.tensor.grad()), layer.push_back(transformer ? sub.layer : -1);
      }
      job.stage_grad_sq[s] = grad_sq_norms(grads, dev);
    }
    pipe.optimizer_.step(params, job.lr);
  }

  void all_reduce(const Action& a) {
    const int s = a.stage;
    if (!pipe.reducer_)
      throw Error("pipeline: the schedule all-reduces across replicas and no reducer is set "
                  "(data parallelism runs one process per pipeline: elasticpipe train --nproc)");
    // The stage's active gradients in parameter order, cut into as many
    // contiguous buckets as the schedule has for it of about equal bytes;
    // every replica cuts the same way.
    std::vector<at::Tensor> grads;
    std::int64_t total = 0;
    for (auto& p : stage_params(s)) {
      at::Tensor& g = p.tensor.mutable_grad();
      if (!g.defined()) g = at::zeros_like(p.tensor);
      grads.push_back(g);
      total += g.numel();
    }
    const int n = job.bucket_count[s];
    std::int64_t seen = 0;
    std::vector<at::Tensor> mine;
    for (const auto& g : grads) {
      const std::int64_t begin = seen;
      seen += g.numel();
      // Parameter g belongs to the bucket its first element falls in.
      if (begin * n / std::max<std::int64_t>(total, 1) == a.bucket) mine.push_back(g);
    }
    Job::Bucket b;
    b.grads = mine;
    std::vector<at::Tensor> flats;
    for (const auto& g : mine) flats.push_back(g.reshape({-1}));
    b.flat = flats.empty() ? at::zeros({0}, at::TensorOptions().device(dev)) : at::cat(flats);
    b.pending = pipe.reducer_->allreduce(device, b.flat,
                                         "all-reduce of stage " + std::to_string(s) + " bucket " + std::to_string(a.bucket));
    b.record = job.records[device].size();  // the record pushed after this action
    job.buckets[s].push_back(std::move(b));
  }

  // Every action kind (planner/schedule.hpp, ActionKind) has its case, no
  // default: a kind added there and not here stops the build.
#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wswitch"
  void run(const Action& a) {
    switch (a.kind) {
      case ActionKind::CacheRead: return cache_read(a);
      case ActionKind::FrozenForward: return frozen_forward(a);
      case ActionKind::CacheWrite: return cache_write(a);
      case ActionKind::Forward: return forward(a);
      case ActionKind::SendAct: return send_act(a);
      case ActionKind::RecvAct: return job.mailbox.wait({Message::Activation, a.stage, a.microbatch});
      case ActionKind::Backward: return backward(a);
      case ActionKind::SendGrad: return send_grad(a);
      case ActionKind::RecvGrad: return job.mailbox.wait({Message::Gradient, a.stage, a.microbatch});
      case ActionKind::OptimizerStep: return optimizer_step(a);
      case ActionKind::AllReduce: return all_reduce(a);
    }
  }
#pragma GCC diagnostic pop
};

void Pipeline::run_device(int device, Job& job) {
  DeviceRun run(*this, job, device);
  const std::vector<Action>& actions = job.schedule->devices[device];
  if (!job.origin) {
    for (const Action& a : actions) run.run(a);
    return;
  }
  std::vector<ActionRecord>& records = job.records[device];
  if (!run.dev.is_cuda()) {  // CPU work has finished when it returns
    for (const Action& a : actions) {
      const double start = seconds_since(*job.origin);
      run.run(a);
      records.push_back({a, device, start, seconds_since(*job.origin)});
    }
    return;
  }
  // A GPU's work is queued: an event before and after each action times
  // what the device ran, read when the host reads the iteration
  // (IterationFuture::get), so tracing neither waits for the device here
  // nor, but for a new anchor, empties its queue first.
  thread_local compat::DeviceMarks::Anchor anchor;  // this worker's, renewed when its device changes
  anchor = compat::DeviceMarks::renew(run.dev, anchor);
  auto marks = std::make_shared<compat::DeviceMarks>(run.dev, anchor);
  for (const Action& a : actions) {
    marks->mark();
    run.run(a);
    marks->mark();
    records.push_back({a, device, 0, 0});
  }
  job.marks[device] = std::move(marks);
}

at::Tensor Pipeline::infer(const at::Tensor& input, const at::Tensor& lengths) {
  c10::NoGradGuard no_grad;
  at::Tensor x = input, n = lengths;
  for (int i = 0; i < model_.num_sublayers(); ++i) {
    const at::Device dev = device_of_sublayer(i);
    if (x.device() != dev) x = x.to(dev);
    if (n.defined() && n.device() != dev) n = n.to(dev);
    x = model_.sublayer(i).forward(x, n);
  }
  return x;
}

}  // namespace ep::exec
