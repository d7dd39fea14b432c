// The one place where LibTorch 1.13 (Debian, CPU) and 2.x (PyPI's torch
// wheel, CUDA; the default build) differ for us. Everything else in exec/ is
// written against the API both share.
#pragma once

#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <c10/core/Device.h>
#include <c10/core/DeviceType.h>
#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/ScalarType.h>
#include <torch/csrc/api/include/torch/version.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "planner/error.hpp"

// torch 2.4 renamed the autocast setters and brought fused Adam(W) to the CPU.
#define EP_TORCH_2_4 (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4))
// torch 2.8 gave every device's host allocator one interface with its statistics.
#define EP_TORCH_2_8 (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 8))

#if TORCH_VERSION_MAJOR >= 2
#include <ATen/ops/scaled_dot_product_attention.h>
#else
#include <ATen/ops/matmul.h>
#include <ATen/ops/softmax.h>
#endif
#ifdef ELASTICPIPE_CUDA
#include <ATen/cuda/Sleep.h>
#include <c10/core/DeviceGuard.h>
#endif
#if EP_TORCH_2_4
#include <ATen/ops/_fused_adam.h>
#include <ATen/ops/_fused_adamw.h>
#include <ATen/ops/full.h>
#else
#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_addcdiv.h>
#include <ATen/ops/_foreach_addcmul.h>
#include <ATen/ops/_foreach_div.h>
#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_foreach_sqrt.h>
#endif

namespace ep::exec::compat {

// Intra-op threads of the calling thread. ATen's first parallel region in a
// thread re-applies the process-wide count (the last set_num_threads of any
// thread), so a thread that sets its own count must initialise first, or a
// stage worker can silently switch team size and its results their
// rounding (seen as non-deterministic losses). "Initialised" is a
// thread_local of an inline function that torch 2.x no longer exports:
// this binary and libtorch each hold one, so both are set here
// (get_num_threads is libtorch's). With only ours, the main thread's first
// large CPU operator in libtorch (the checkpoint's finiteness check) took
// the workers' count and kept a second OpenMP team: libgomp then stops
// spinning, and every later epoch on a 2-core CPU ran 1.3x slower.
inline void set_thread_count(int n) {
  at::internal::lazy_init_num_threads();
  (void)at::get_num_threads();
  at::set_num_threads(n);
}

// Autocast state is thread-local: each stage worker sets its own.
inline void set_autocast(c10::DeviceType device, bool enabled, c10::ScalarType dtype) {
#if EP_TORCH_2_4
  at::autocast::set_autocast_enabled(device, enabled);
  at::autocast::set_autocast_dtype(device, dtype);
#else
  if (device == c10::DeviceType::CUDA) {
    at::autocast::set_enabled(enabled);
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_cpu_enabled(enabled);
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
#endif
  if (!enabled) at::autocast::clear_cache();
}

// The calling thread's autocast state on `device`.
inline bool autocast_enabled(c10::DeviceType device) {
#if EP_TORCH_2_4
  return at::autocast::is_autocast_enabled(device);
#else
  return device == c10::DeviceType::CUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
#endif
}
inline c10::ScalarType autocast_dtype(c10::DeviceType device) {
#if EP_TORCH_2_4
  return at::autocast::get_autocast_dtype(device);
#else
  return device == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype()
                                         : at::autocast::get_autocast_cpu_dtype();
#endif
}

// bf16 autocast on `device` (as a stage worker sets it), or none, for this
// object's lifetime in the calling thread; then the thread's state before
// it (a stage worker's own autocast survives a scope run on it).
class AutocastScope {
 public:
  AutocastScope(c10::DeviceType device, bool bf16)
      : device_(device), was_on_(autocast_enabled(device)), was_dtype_(autocast_dtype(device)) {
    set_autocast(device_, bf16, c10::ScalarType::BFloat16);
  }
  ~AutocastScope() { set_autocast(device_, was_on_, was_dtype_); }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  c10::DeviceType device_;
  bool was_on_;
  c10::ScalarType was_dtype_;
};

// One Adam step (AdamW: `decoupled` weight decay) over parameters of one
// device that share their step count `step` (>= 1), betas (0.9, 0.999), eps
// 1e-8, torch.optim's equations: from torch 2.4 its fused kernel (CPU and
// CUDA, one pass per parameter, step counts as tensors on the device),
// before that multi-tensor ops.
inline void adam_step(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                      const std::vector<at::Tensor>& m, const std::vector<at::Tensor>& v, std::int64_t step,
                      double lr, double weight_decay, bool decoupled) {
  constexpr double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
#if EP_TORCH_2_4
  const at::Tensor steps = at::full({static_cast<std::int64_t>(params.size())}, static_cast<double>(step),
                                    at::TensorOptions().dtype(at::kFloat).device(params.front().device()));
  const std::vector<at::Tensor> state_steps = steps.unbind(0);
  if (decoupled)
    at::_fused_adamw_(params, grads, m, v, {}, state_steps, lr, beta1, beta2, weight_decay, eps, false, false);
  else
    at::_fused_adam_(params, grads, m, v, {}, state_steps, lr, beta1, beta2, weight_decay, eps, false, false);
#else
  std::vector<at::Tensor> g = grads;
  if (decoupled) at::_foreach_mul_(params, 1 - lr * weight_decay);
  else if (weight_decay != 0) g = at::_foreach_add(g, params, weight_decay);
  at::_foreach_mul_(m, beta1);
  at::_foreach_add_(m, g, 1 - beta1);
  at::_foreach_mul_(v, beta2);
  at::_foreach_addcmul_(v, g, g, 1 - beta2);
  const double bias1 = 1 - std::pow(beta1, static_cast<double>(step));
  const double bias2 = 1 - std::pow(beta2, static_cast<double>(step));
  std::vector<at::Tensor> denom = at::_foreach_sqrt(v);
  at::_foreach_div_(denom, std::sqrt(bias2));
  at::_foreach_add_(denom, eps);
  at::_foreach_addcdiv_(params, m, denom, -lr / bias1);
#endif
}

// Softmax attention over [B, heads, S, d] as two products and a softmax,
// holding the S x S weights; `on_weights`, where given, transforms them
// before the second product (dropout, whose mask no fused kernel takes).
// `keys` as for attention below.
inline at::Tensor attention_products(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const at::Tensor& keys,
                                     const std::function<at::Tensor(const at::Tensor&)>& on_weights = {}) {
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  if (keys.defined()) scores = scores.masked_fill(keys.logical_not(), -std::numeric_limits<float>::infinity());
  const at::Tensor weights = at::softmax(scores, -1);
  return at::matmul(on_weights ? on_weights(weights) : weights, v);
}

// Softmax attention over [B, heads, S, d]; `keys` (bool, broadcast to
// [B, heads, S, S], true where a query may look at a key) masks padding,
// undefined: none. torch 2.x has fused kernels (flash and memory-efficient
// attention on CUDA, a blocked loop on CPU) that never hold the S x S
// scores; 1.13 has none, so there it is attention_products.
inline at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& keys = {}) {
#if TORCH_VERSION_MAJOR >= 2
  if (keys.defined()) return at::scaled_dot_product_attention(q, k, v, keys);
  return at::scaled_dot_product_attention(q, k, v);
#else
  return attention_products(q, k, v, keys);
#endif
}

// `device` with its index: an index-less GPU ("cuda") is this thread's
// current one. Comparing devices and calls per device need the index.
inline c10::Device indexed(const c10::Device& device) {
  if (!device.is_cuda() || device.has_index()) return device;
  return c10::impl::getDeviceGuardImpl(device.type())->getDevice();
}

// Makes `device` this thread's current GPU (nothing on the CPU). Torch puts
// a thread's current device back after recording or destroying an event on
// another one; a thread that never chose one gets GPU 0 back, and with it a
// CUDA context there (hundreds of MB) in a process that trains on another
// GPU. So each thread that works on a GPU names it first.
inline void use_device(const c10::Device& device) {
  if (device.is_cuda()) c10::impl::getDeviceGuardImpl(device.type())->setDevice(indexed(device));
}

// Waits for the device's queued work (CUDA), so a recorded end time means
// the work is done. 1.13 builds are CPU-only here, where there is nothing to wait for.
inline void synchronize(const c10::Device& device) {
#if TORCH_VERSION_MAJOR >= 2
  if (device.is_cuda()) c10::impl::getDeviceGuardImpl(device.type())->synchronizeDevice(indexed(device).index());
#else
  (void)device;
#endif
}

// Calls `f` when `future` completes (a collective's; for NCCL that is when
// the collective is queued on the device). torch 2.x runs a callback that
// does not use its future without taking a stream from torch's pool to wait
// for the collective; 1.13 has no such flag (its builds are CPU-only here).
template <class Future, class F>
void when_done(Future& future, F f) {
#if TORCH_VERSION_MAJOR >= 2
  future.addCallback([f = std::move(f)](auto&) { f(); }, /*uses_future=*/false);
#else
  future.addCallback([f = std::move(f)](auto&) { f(); });
#endif
}

// Waits until the device has passed `event`. 1.13's Event has no
// synchronize(): it polls (1.13 builds are CPU-only here, so no event is
// ever pending there).
inline void wait(const c10::Event& event) {
#if TORCH_VERSION_MAJOR >= 2
  event.synchronize();
#else
  while (!event.query()) std::this_thread::yield();
#endif
}

#if TORCH_VERSION_MAJOR >= 2
// A timing event recorded now on `device`'s current stream.
inline c10::Event recorded_event(const c10::Device& device) {
  c10::Event e(device.type(), c10::EventFlag::BACKEND_DEFAULT);
  e.record(c10::impl::getDeviceGuardImpl(device.type())->getStream(device));
  return e;
}
#endif

// Events on a device's stream read on the host's clock after the fact:
// each one's time is an anchor's (an event recorded where the device's
// queue was empty, at a known host time) plus the device's time since it.
// One anchor serves kAnchorSpan_s of marks (elapsed times are float ms:
// within a microsecond over that span), so timing an iteration neither
// empties the queue before it nor waits for it after; only a new anchor
// does. CUDA only; 1.13 builds are CPU-only.
class DeviceMarks {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  struct Anchor {
    std::shared_ptr<c10::Event> event;
    c10::Device device = c10::kCPU;
    TimePoint host;
  };
  static constexpr double kAnchorSpan_s = 10;

  // `anchor` while it is on `device` and younger than kAnchorSpan_s, else a new one.
  static Anchor renew(const c10::Device& device, Anchor anchor) {
#if TORCH_VERSION_MAJOR >= 2
    if (anchor.event && anchor.device == device &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - anchor.host).count() < kAnchorSpan_s)
      return anchor;
    synchronize(device);
    auto event = std::make_shared<c10::Event>(recorded_event(device));
    return {std::move(event), device, std::chrono::steady_clock::now()};
#else
    (void)anchor;
    throw Error("timing a " + device.str() + " device needs a torch 2.x build");
#endif
  }

  DeviceMarks(const c10::Device& device, Anchor anchor) : device_(device), anchor_(std::move(anchor)) {}
  // An event at this point of the device's current stream.
  void mark() {
#if TORCH_VERSION_MAJOR >= 2
    events_.push_back(recorded_event(device_));
#endif
  }
  // The host-clock time of each mark, in order; waits until the device has
  // passed the last.
  [[nodiscard]] std::vector<TimePoint> times() const {
    std::vector<TimePoint> t;
    if (events_.empty()) return t;
    wait(events_.back());
    for (const c10::Event& e : events_) t.push_back(since_anchor(e));
    return t;
  }
  // The host-clock time of `event`, one of this device's on any of its
  // streams; waits until the device has passed it.
  [[nodiscard]] TimePoint time_of(const c10::Event& event) const {
    wait(event);
    return since_anchor(event);
  }

 private:
  [[nodiscard]] TimePoint since_anchor(const c10::Event& e) const {
#if TORCH_VERSION_MAJOR >= 2
    return anchor_.host + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(anchor_.event->elapsedTime(e) / 1000.0));
#else
    (void)e;
    return anchor_.host;  // not reached: 1.13 builds record no device events
#endif
  }

  c10::Device device_;
  Anchor anchor_;
  std::vector<c10::Event> events_;
};

// `device`'s current stream held busy for about `seconds` by a kernel that
// spins, so what the host queues next starts behind it. CUDA builds only.
inline void hold_stream(const c10::Device& device, double seconds) {
#ifdef ELASTICPIPE_CUDA
  const c10::DeviceGuard guard(device);
  // The spin kernel counts clock cycles: their rate, measured once by events.
  static std::once_flag once;
  static double cycles_per_s = 0;
  std::call_once(once, [&] {
    constexpr std::int64_t kCycles = 20'000'000;  // ~10 ms at 2 GHz
    at::cuda::sleep(1000);                        // loads the kernel
    synchronize(device);
    const c10::Event a = recorded_event(device);
    at::cuda::sleep(kCycles);
    const c10::Event b = recorded_event(device);
    b.synchronize();
    cycles_per_s = static_cast<double>(kCycles) / (a.elapsedTime(b) / 1000.0);
  });
  if (seconds > 0) at::cuda::sleep(static_cast<std::int64_t>(seconds * cycles_per_s));
#else
  (void)seconds;
  throw Error("holding a " + device.str() + " device's stream needs a CUDA build (-DELASTICPIPE_CUDA=ON)");
#endif
}

// One run of `run` on `device` with its queue busy: queued behind a spin
// kernel of `hold_s`, so its kernels run back to back, none waiting for its
// launch. The device's seconds between events around it, and the host's
// seconds queuing it.
struct QueuedTime {
  double device_s = 0, host_s = 0;
};
template <class Run>
QueuedTime queued_seconds(const c10::Device& device, double hold_s, Run&& run) {
  synchronize(device);
  hold_stream(device, hold_s);
#if TORCH_VERSION_MAJOR >= 2
  const c10::Event start = recorded_event(device);
  const auto t0 = std::chrono::steady_clock::now();
  run();
  const double host_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const c10::Event end = recorded_event(device);
  end.synchronize();
  return {start.elapsedTime(end) / 1000.0, host_s};
#else
  (void)run;
  return {};  // not reached: hold_stream refuses a build without CUDA
#endif
}

}  // namespace ep::exec::compat
