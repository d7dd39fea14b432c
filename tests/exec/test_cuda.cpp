// The CUDA path: stages on a GPU, bf16 autocast there, NCCL lanes. These
// run where a GPU is visible (at::hasCUDA()); elsewhere each says
// "skipped: no GPU" and CTest reports it skipped (tests/exec/CMakeLists.txt).
// Every build compiles and links them.
#include "tests/exec/pch.hpp"

#include <ATen/autocast_mode.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>

#include "exec/cache.hpp"
#include "exec/dist.hpp"
#include "exec/job.hpp"
#include "exec/launch.hpp"
#include "exec/model.hpp"
#include "exec/optimizer.hpp"
#include "exec/pipeline.hpp"
#include "exec/profiler.hpp"
#include "exec/progress.hpp"
#include "exec/streams.hpp"
#include "exec/timing.hpp"
#include "exec/torch_compat.hpp"
#include "planner/iteration.hpp"
#include "tests/exec/support.hpp"

namespace {

using namespace ep;
using namespace ep::exec;
using testing::split;

bool no_gpu() {
  if (at::hasCUDA()) return false;
  WARN("skipped: no GPU (at::hasCUDA() is false: no CUDA device visible, or a LibTorch without CUDA)");
  return true;
}

Partition halves(int sublayers) {
  Partition p;
  p.bounds = {0, sublayers / 2, sublayers};
  return p;
}

Schedule one_f_one_b(int K, int M) {
  ScheduleOptions o;
  o.kind = ScheduleKind::OneFOneB;
  o.K = K;
  o.M = M;
  o.optimizer_step = false;
  Schedule s = build_schedule(o);
  check_schedule(s);
  return s;
}

// Loss and gradients (on the CPU) of one 1F1B iteration on `devices`.
std::pair<double, std::map<std::string, at::Tensor>> iteration(const ModelConfig& m, std::vector<at::Device> devices,
                                                               bool bf16, const at::Tensor& x, const at::Tensor& y) {
  Model model(m, 7);
  exec::Optimizer opt(testing::sgd());
  const int K = static_cast<int>(devices.size());
  Pipeline pipe(model, opt, {std::move(devices), bf16});
  pipe.configure(halves(model.num_sublayers()), K, 1);
  const double loss = pipe.run(testing::program_of(one_f_one_b(K, 4)), split(x, y, 4), static_cast<int>(x.size(0)), 0).loss;
  std::map<std::string, at::Tensor> grads;
  for (const auto& p : model.named_params())
    if (p.tensor.grad().defined()) grads[p.name] = p.tensor.grad().cpu();
  return {loss, grads};
}

}  // namespace

TEST_CASE("CUDA: a two-stage pipeline on the GPU gives the CPU pipeline's loss and gradients", "[cuda]") {
  if (no_gpu()) return;
  const ModelConfig m = testing::tiny(ModelFamily::ViT);
  at::manual_seed(1);
  const at::Tensor x = at::randn({12, m.num_channels, m.image_size, m.image_size});
  const at::Tensor y = at::randint(0, m.num_labels, {12}, at::kLong);
  const at::Device cpu(at::kCPU), gpu(at::kCUDA, 0);
  const auto [cpu_loss, cpu_grads] = iteration(m, {cpu, cpu}, false, x, y);
  const auto [gpu_loss, gpu_grads] = iteration(m, {gpu, gpu}, false, x, y);
  CHECK(gpu_loss == Approx(cpu_loss).epsilon(1e-4));
  REQUIRE(gpu_grads.size() == cpu_grads.size());
  for (const auto& [name, g] : cpu_grads) {
    INFO(name);
    CHECK(at::allclose(gpu_grads.at(name), g, 1e-3, 1e-4));
  }
}

TEST_CASE("CUDA: bf16 autocast runs a stage's matrix products in bf16 and trains to a finite loss", "[cuda]") {
  if (no_gpu()) return;
  const at::Device gpu(at::kCUDA, 0);
  compat::set_autocast(at::kCUDA, true, at::kBFloat16);
  const at::Tensor a = at::randn({8, 8}, at::TensorOptions().device(gpu));
  CHECK(at::matmul(a, a).scalar_type() == at::kBFloat16);
  compat::set_autocast(at::kCUDA, false, at::kBFloat16);
  CHECK(at::matmul(a, a).scalar_type() == at::kFloat);

  const ModelConfig m = testing::tiny(ModelFamily::ViT);
  at::manual_seed(2);
  const at::Tensor x = at::randn({12, m.num_channels, m.image_size, m.image_size});
  const at::Tensor y = at::randint(0, m.num_labels, {12}, at::kLong);
  const auto [fp32_loss, fp32_grads] = iteration(m, {gpu, gpu}, false, x, y);
  const auto [bf16_loss, bf16_grads] = iteration(m, {gpu, gpu}, true, x, y);
  CHECK(std::isfinite(bf16_loss));
  CHECK(bf16_loss == Approx(fp32_loss).epsilon(0.05));  // bf16 keeps 8 bits of mantissa
  CHECK(bf16_grads.size() == fp32_grads.size());
}

namespace {
// A job of one process: its groups are of one rank.
std::unique_ptr<Dist> one_rank() {
  return std::make_unique<Dist>(local_env(0, 1, free_port(), "test"), std::chrono::seconds(30));
}
}  // namespace

TEST_CASE("CUDA: an NCCL lane of one rank builds and reduces a device tensor", "[cuda][dist]") {
  if (no_gpu()) return;
  const std::unique_ptr<Dist> dist = one_rank();
  dist->rebuild_active(0, {0}, 1, {at::Device(at::kCUDA, 0)});
  const at::Tensor t = at::arange(6, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, 0));
  at::Tensor sum = t.clone();
  dist->allreduce(0, sum, "test sum")->wait();
  CHECK(at::equal(sum.cpu(), t.cpu()));
  at::Tensor host = at::full({3}, 2.0);
  dist->allreduce_now(host, "host value through the NCCL lane");
  CHECK(at::equal(host, at::full({3}, 2.0)));
}

TEST_CASE("CUDA: batches loaded ahead onto the GPU equal the host's, and train to the CPU pipeline's loss", "[cuda]") {
  if (no_gpu()) return;
  const ModelConfig m = testing::tiny(ModelFamily::ViT);
  const Dataset d = synthetic_images(64, m.num_channels, m.image_size, m.num_labels, 3, true);
  const at::Device gpu(at::kCUDA, 0);
  std::vector<std::vector<std::int64_t>> idx;
  for (int b = 0; b < 4; ++b) idx.push_back({4 * b, 4 * b + 1, 4 * b + 2, b == 3 ? -1 : 4 * b + 3});
  BatchLoader loader(d);
  loader.request({idx, gpu, gpu, true});
  const std::vector<MicroBatch> on_gpu = loader.take({idx, gpu, gpu, true});
  std::vector<MicroBatch> on_cpu;
  for (const auto& i : idx) on_cpu.push_back(make_batch(d, i));
  for (std::size_t b = 0; b < idx.size(); ++b) {
    CHECK(on_gpu[b].input.device() == gpu);
    CHECK(on_gpu[b].labels.device() == gpu);
    CHECK(at::equal(on_gpu[b].input.cpu(), on_cpu[b].input));
    CHECK(at::equal(on_gpu[b].weights.cpu(), on_cpu[b].weights));
  }
  const auto loss = [&](std::vector<at::Device> devices, const std::vector<MicroBatch>& batches) {
    Model model(m, 7);
    exec::Optimizer opt(testing::sgd());
    Pipeline pipe(model, opt, {devices, false});
    pipe.configure(halves(model.num_sublayers()), 2, 1);
    return pipe.run(testing::program_of(one_f_one_b(2, 4)), batches, 15, 0).loss;
  };
  CHECK(loss({gpu, gpu}, on_gpu) == Approx(loss({at::kCPU, at::kCPU}, on_cpu)).epsilon(1e-4));
}

TEST_CASE("CUDA: the activation cache stores GPU rows (bf16 too) behind the worker's back and reads them back to the GPU",
          "[cuda]") {
  if (no_gpu()) return;
  const at::Device gpu(at::kCUDA, 0);
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("ep_cuda_cache_" + std::to_string(::getpid()))).string();
  ActivationCache cache(path, 300, {197, 64}, true, std::chrono::milliseconds(0));
  at::manual_seed(5);
  // 256 rows of 50 KB: split over the copying threads.
  std::vector<std::int64_t> idx(256);
  for (int k = 0; k < 256; ++k) idx[k] = k % 7 == 3 ? -1 : (k * 37) % 300;
  const at::Tensor v = at::randn({256, 197, 64}, at::TensorOptions().device(gpu));
  cache.write(idx, v, 1);
  cache.flush();
  const at::Tensor back = cache.read(idx, 1, gpu);
  CHECK(back.device() == gpu);
  const at::Tensor masked = (at::tensor(idx, at::kLong) < 0).view({256, 1, 1});
  CHECK(at::equal(back.cpu(), v.cpu().masked_fill(masked, 0)));
  // Read while the current stream is still busy: the copy runs beside it,
  // and what the stream runs next sees the rows.
  compat::hold_stream(gpu, 0.05);
  const at::Tensor doubled = cache.read(idx, 1, gpu) * 2;
  CHECK(at::equal(doubled.cpu(), v.cpu().masked_fill(masked, 0) * 2));
  // A write returns before its rows are stored: the GPU tensor may go at
  // once, and the block it frees is not handed out before the copy is done.
  {
    at::Tensor gone = at::randn({256, 197, 64}, at::TensorOptions().device(gpu));
    const at::Tensor kept = gone.cpu();
    const ActivationCache::HostTimes before = cache.host_times();
    compat::hold_stream(gpu, 0.05);  // the copy waits for this stream's work so far
    cache.write(idx, gone, 2, /*behind=*/true);
    gone.reset();
    const at::Tensor reused = at::full({256, 197, 64}, 7.0f, at::TensorOptions().device(gpu));
    cache.flush();
    CHECK(at::equal(cache.read(idx, 2, gpu).cpu(), kept.masked_fill(masked, 0)));
    CHECK(reused.min().item<float>() == 7.0f);
    // The store waited for the held stream's copy, and says so (the host line's figure).
    const ActivationCache::HostTimes after = cache.host_times();
    CHECK(after.writes == before.writes + 1);
    CHECK(after.store_device_s - before.store_device_s > 0.03);
  }
  // A bf16 batch is stored as its float32 values.
  const at::Tensor h = v.narrow(0, 0, 8).to(at::kBFloat16);
  const std::vector<std::int64_t> eight{0, 1, 2, 4, 5, 6, 8, 9};
  cache.write(eight, h, 3);
  cache.flush();
  CHECK(at::equal(cache.read(eight, 3, gpu).cpu(), h.cpu().to(at::kFloat)));
  cache.remove();
}

TEST_CASE("CUDA: a pinned block the host allocator had to make is counted with its time and size, a reused one is not",
          "[cuda]") {
  if (no_gpu()) return;
#if EP_TORCH_2_8
  // 3 MB + 1 byte rounds up to a 4 MB block: no other test asks for one.
  const auto pinned = [] { return at::empty({3 * 1024 * 1024 + 1}, at::TensorOptions().dtype(at::kByte).pinned_memory(true)); };
  const PinnedAllocs before = pinned_allocs_now().value();
  pinned().fill_(1);  // made, then back in the allocator's free list
  const PinnedAllocs made = pinned_allocs_now().value();
  CHECK(made.blocks == before.blocks + 1);
  CHECK(made.alloc_s > before.alloc_s);
  CHECK(made.bytes == before.bytes + 4 * 1024 * 1024);
  pinned().fill_(2);  // the cached block again
  const PinnedAllocs again = pinned_allocs_now().value();
  CHECK(again.blocks == made.blocks);
  CHECK(again.alloc_s == made.alloc_s);
  CHECK(again.bytes == made.bytes);
#else
  CHECK_FALSE(pinned_allocs_now().has_value());
#endif
}

TEST_CASE("CUDA: copies to and from a GPU each have one side stream, the same on every call", "[cuda]") {
  if (no_gpu()) return;
  const at::Device gpu(at::kCUDA, 0);
  compat::use_device(gpu);
  const c10::Stream to = side_stream(gpu, SideUse::CopyToDevice);
  CHECK(side_stream(gpu, SideUse::CopyToDevice) == to);  // blocks freed after a copy are reused by the next
  CHECK(side_stream(at::Device(at::kCUDA), SideUse::CopyToDevice) == to);  // index-less: the current GPU
  CHECK(side_stream(gpu, SideUse::CopyFromDevice) != to);
  CHECK(side_stream(gpu, SideUse::CopyFromDevice) == side_stream(gpu, SideUse::CopyFromDevice));
  CHECK(to != c10::impl::getDeviceGuardImpl(at::kCUDA)->getStream(gpu));  // not the compute stream
}

// The tiny ViT as one stage on GPU 0, and a batch of 8 in 4 micro-batches.
struct OneStageOnGpu {
  ModelConfig m = testing::tiny(ModelFamily::ViT);
  at::Device gpu{at::kCUDA, 0};
  Model model{m, 7};
  exec::Optimizer opt{testing::sgd()};
  Pipeline pipe{model, opt, {{gpu}, false}};
  IterationProgram program = testing::program_of(one_f_one_b(1, 4));
  std::vector<MicroBatch> batches;
  OneStageOnGpu() {
    at::manual_seed(4);
    const at::Tensor x = at::randn({8, m.num_channels, m.image_size, m.image_size});
    const at::Tensor y = at::randint(0, m.num_labels, {8}, at::kLong);
    // On the GPU, as training's loader puts them: a pageable batch copied
    // there inside the iteration would wait for the device's queue.
    for (MicroBatch& mb : split(x, y, 4))
      batches.push_back({mb.input.to(gpu), mb.labels.to(gpu), mb.weights.to(gpu), mb.indices});
    Partition one;
    one.bounds = {0, model.num_sublayers()};
    pipe.configure(one, 1, 1);
  }
};

TEST_CASE("CUDA: a traced iteration times each action by events: in order, inside the host's window", "[cuda]") {
  if (no_gpu()) return;
  OneStageOnGpu s;
  const auto origin = std::chrono::steady_clock::now();
  const IterationResult r = s.pipe.run(s.program, s.batches, 8, 0, origin);
  const double after = std::chrono::duration<double>(std::chrono::steady_clock::now() - origin).count();
  REQUIRE(r.records.size() == 8);  // 4 forwards, 4 backwards
  double last_end = 0;
  for (const ActionRecord& a : r.records) {
    CHECK(a.start_s >= 0);
    CHECK(a.end_s >= a.start_s);
    CHECK(a.start_s >= last_end - 1e-6);  // one stream: each action starts after the last ended
    CHECK(a.end_s <= after);
    last_end = a.end_s;
  }
}

TEST_CASE("CUDA: a traced iteration is queued like any other: launch returns before the device runs it", "[cuda]") {
  if (no_gpu()) return;
  using Clock = std::chrono::steady_clock;
  const auto since = [](Clock::time_point a) { return std::chrono::duration<double>(Clock::now() - a).count(); };
  OneStageOnGpu s;
  const auto origin = Clock::now();
  (void)s.pipe.run(s.program, s.batches, 8, 0, origin);  // the device's clock anchored
  compat::hold_stream(s.gpu, 0.2);                       // the device busy for 0.2 s
  const auto t0 = Clock::now();
  const double launched_at = std::chrono::duration<double>(t0 - origin).count();
  IterationFuture queued = s.pipe.launch(s.program, s.batches, 8, 0, origin);
  CHECK(since(t0) < 0.1);  // not waited for
  const IterationResult r = queued.get();
  CHECK(since(t0) > 0.15);
  REQUIRE(r.records.size() == 8);
  for (const ActionRecord& a : r.records) CHECK(a.start_s > launched_at + 0.15);  // ran after the hold
}

TEST_CASE("CUDA: a traced all-reduce on an NCCL lane ends on the device's clock, after it started", "[cuda][dist]") {
  if (no_gpu()) return;
  const std::unique_ptr<Dist> dist = one_rank();
  OneStageOnGpu s;
  dist->rebuild_active(0, {0}, 1, {s.gpu});
  s.pipe.set_reducer(dist.get());
  ScheduleOptions o;
  o.kind = ScheduleKind::OneFOneB;
  o.M = 4;
  o.buckets_per_stage = {2};
  o.optimizer_step = true;
  const IterationProgram program = testing::program_of(build_schedule(o));
  const auto origin = std::chrono::steady_clock::now();
  (void)s.pipe.run(program, s.batches, 8, 0, origin);  // the device's clock anchored
  // The device busy while the host queues the iteration: c10d completes an
  // NCCL all-reduce's future when it is queued, long before the device runs it.
  compat::hold_stream(s.gpu, 0.2);
  const IterationResult r = s.pipe.launch(program, s.batches, 8, 0, origin).get();
  const double after = std::chrono::duration<double>(std::chrono::steady_clock::now() - origin).count();
  int reduces = 0;
  for (const ActionRecord& a : r.records)
    if (a.action.kind == ActionKind::AllReduce) {
      ++reduces;
      CHECK(a.end_s >= a.start_s);
      CHECK(a.end_s <= after);
    }
  CHECK(reduces == 2);
}

TEST_CASE("CUDA: the optimizer's fused steps on the GPU equal its steps on the CPU", "[cuda]") {
  if (no_gpu()) return;
  for (const ep::Optimizer kind : {ep::Optimizer::SGD, ep::Optimizer::Adam, ep::Optimizer::AdamW}) {
    INFO(to_string(kind));
    const TrainingConfig t = testing::update_rule(kind);
    at::manual_seed(5);
    std::vector<NamedTensor> cpu, gpu;
    for (int i = 0; i < 3; ++i) {
      const at::Tensor w = at::randn({5 + i, 3});
      cpu.push_back({"w" + std::to_string(i), w.clone()});
      gpu.push_back({"w" + std::to_string(i), w.to(at::kCUDA)});
    }
    exec::Optimizer a(t), b(t);
    for (int i = 0; i < 3; ++i) a.add(cpu[i].name), b.add(gpu[i].name);
    for (int step = 0; step < 10; ++step)
      for (int i = 0; i < 3; ++i) {
        const at::Tensor g = at::randn(cpu[i].tensor.sizes());
        cpu[i].tensor.mutable_grad() = g;
        gpu[i].tensor.mutable_grad() = g.to(at::kCUDA);
        if (i == 2) a.step(cpu, t.lr), b.step(gpu, t.lr);
      }
    for (int i = 0; i < 3; ++i) CHECK(at::allclose(gpu[i].tensor.cpu(), cpu[i].tensor, 1e-5, 1e-6));
  }
}

TEST_CASE("CUDA: the state made and the step warmed up in a run's start change no fused step, bit for bit", "[cuda]") {
  if (no_gpu()) return;
  for (const ep::Optimizer kind : {ep::Optimizer::SGD, ep::Optimizer::Adam, ep::Optimizer::AdamW}) {
    INFO(to_string(kind));
    const TrainingConfig t = testing::update_rule(kind);
    at::manual_seed(6);
    std::vector<NamedTensor> ahead, lazy;
    for (int i = 0; i < 3; ++i) {
      const at::Tensor w = at::randn({5 + i, 3}).to(at::kCUDA);
      ahead.push_back({"w" + std::to_string(i), w.clone()});
      lazy.push_back({"w" + std::to_string(i), w.clone()});
    }
    exec::Optimizer a(t), b(t);
    for (int i = 0; i < 3; ++i) a.add(ahead[i].name), b.add(lazy[i].name);
    a.warm_up(ahead.front().tensor.options(), true);
    a.make_state(ahead);
    for (int step = 0; step < 5; ++step) {
      for (int i = 0; i < 3; ++i) {
        const at::Tensor g = at::randn(ahead[i].tensor.sizes()).to(at::kCUDA);
        ahead[i].tensor.mutable_grad() = g.clone();
        lazy[i].tensor.mutable_grad() = g.clone();
      }
      a.step(ahead, t.lr);
      b.step(lazy, t.lr);
    }
    for (int i = 0; i < 3; ++i) CHECK(at::equal(ahead[i].tensor, lazy[i].tensor));
  }
}

TEST_CASE("CUDA: profile times the GPU at the training precision, and says so", "[cuda]") {
  if (no_gpu()) return;
  const Config c = parse_config(testing::kTiny, "tiny.toml",
                                {"exec.device=\"cuda\"", "training.precision=\"bf16\"", "cluster.gpus_per_node=1",
                                 "planner.K=1"});
  ProfileOptions o;
  o.repeats = 2;
  const Profile p = profile_executor(c, o);
  CHECK_THAT(p.environment, Catch::Contains("cuda:0") && Catch::Contains("bf16"));
  CHECK_FALSE(p.compute.empty());
  for (const auto& s : p.compute) CHECK(s.seconds > 0);
  const auto of_op = [&](const char* kind, const char* op) {
    return std::count_if(p.compute.begin(), p.compute.end(),
                         [&](const ComputeSample& s) { return s.sublayer_kind == kind && s.op == op; });
  };
  // The input's gradient alone: attention and MLP only, at every size; no model chain of its own.
  CHECK(of_op("attention", "backward_input") == of_op("attention", "backward"));
  CHECK(of_op("mlp", "backward_input") == of_op("mlp", "backward"));
  CHECK(of_op("stem", "backward_input") + of_op("head", "backward_input") == 0);
  const auto inside = of_op("attention", "backward_input") + of_op("mlp", "backward_input");
  CHECK(p.model_chain.size() == (p.compute.size() - inside) / 4);  // per op and size, as each of the four kinds
  for (const char* kind : {"stem", "attention", "mlp", "head"})  // bf16: a later micro-batch's forward too
    CHECK(of_op(kind, "forward_again") == of_op(kind, "forward"));
  CHECK(p.allreduce.empty());  // one GPU: no NCCL ring to time
}

TEST_CASE("CUDA: compute timed behind a held stream leaves out kernel launches, not the kernels", "[cuda]") {
  if (no_gpu()) return;
  const at::Device gpu(at::kCUDA, 0);
  // The spin holds the stream about as long as asked.
  compat::hold_stream(gpu, 0);  // measures its clock rate once
  const compat::QueuedTime spin = compat::queued_seconds(gpu, 0, [&] { compat::hold_stream(gpu, 5e-3); });
  CHECK(spin.device_s == Approx(5e-3).epsilon(0.3));
  CHECK(spin.host_s < 1e-3);  // queued, not waited for
  // Many tiny kernels: from an empty queue each waits for its launch;
  // queued behind a spin they run back to back.
  const at::Tensor t = at::zeros({1}, at::TensorOptions().device(gpu));
  const auto tiny = [&] {
    for (int i = 0; i < 200; ++i) t.add_(1);
  };
  const double empty = median_device_seconds(gpu, 5, tiny);
  const compat::QueuedTime held = compat::queued_seconds(gpu, 0.05, tiny);
  CHECK(held.device_s < 0.8 * empty);
  CHECK(median_compute_seconds(gpu, 5, tiny) >= held.device_s * 0.5);
  // One long kernel: nothing to hide, the same time either way.
  const at::Tensor a = at::randn({4096, 4096}, at::TensorOptions().device(gpu));
  const auto product = [&] { (void)at::mm(a, a); };
  const double alone = median_device_seconds(gpu, 5, product);
  CHECK(median_compute_seconds(gpu, 5, product) == Approx(alone).epsilon(0.1));
  // Its parts: each run takes the slower of the two, so the median is no less than either part's.
  for (const ComputeTimes t : {median_compute_times(gpu, 5, [] {}, tiny), median_compute_times(gpu, 5, [] {}, product)}) {
    CHECK(t.host_s > 0);
    CHECK(t.device_s > 0);
    CHECK(t.seconds >= std::max(t.host_s, t.device_s));
  }
  // A long kernel is the device's, queued in a moment.
  CHECK(median_compute_times(gpu, 5, [] {}, product).host_s < 0.5 * alone);
}

// No GPU needed: the layouts are plain data, checked before NCCL starts.
TEST_CASE("ranks that would share a GPU in an NCCL lane are refused before NCCL starts, naming ranks and device") {
  // One node of 4 GPUs; AutoDP reaches K = 4, 2, 1 with 1, 2, 4 replicas.
  const Config c = parse_config(testing::kTiny, "tiny.toml",
                                {"exec.device=\"cuda\"", "planner.autodp=true", "planner.compression=\"memory\""});
  CHECK_NOTHROW(check_gpus_not_shared(c, 4));
  CHECK_NOTHROW(check_gpus_not_shared(c, 8));  // more GPUs than the config names: each rank still has its own
  // Two GPUs visible: at K = 2 the replicas' stage 0 (GPUs 0 and 2) both land on cuda:0.
  CHECK_THROWS_WITH(check_gpus_not_shared(c, 2),
                    Catch::StartsWith("tiny.toml: ranks 0 and 1 would share cuda:0 on node 0 in NCCL lane 0 (K = 2, 2 "
                                      "replicas)") &&
                        Catch::Contains("this process sees 2 GPU(s), cluster.gpus_per_node is 4"));
  CHECK_THROWS_WITH(check_gpus_not_shared(c, 1), Catch::Contains("would share cuda:0"));
  // One pipeline, no replicas: its stages may share a GPU (no NCCL among them).
  const Config one = parse_config(testing::kTiny, "tiny.toml", {"exec.device=\"cuda\""});
  CHECK_NOTHROW(check_gpus_not_shared(one, 1));
  // On the CPU nothing is checked.
  CHECK_NOTHROW(check_gpus_not_shared(parse_config(testing::kTiny, "tiny.toml", {"planner.autodp=true"}), 1));
}
