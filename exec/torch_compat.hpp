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

#include <cmath>
#include <thread>
#include <vector>

#include "planner/error.hpp"

#if TORCH_VERSION_MAJOR >= 2
#include <ATen/ops/scaled_dot_product_attention.h>
#else
#include <ATen/ops/matmul.h>
#include <ATen/ops/softmax.h>
#endif

namespace ep::exec::compat {

inline constexpr bool kTorch24OrLater =
    TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4);

// Intra-op threads of the calling thread. ATen's first parallel region in a
// thread re-applies the process-wide count (the last set_num_threads of any
// thread), so a thread that sets its own count must initialise first, or a
// stage worker can silently switch team size and its results their
// rounding (seen as non-deterministic losses).
inline void set_thread_count(int n) {
  at::internal::lazy_init_num_threads();
  at::set_num_threads(n);
}

// Autocast state is thread-local: each stage worker sets its own.
inline void set_autocast(c10::DeviceType device, bool enabled, c10::ScalarType dtype) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
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

// bf16 autocast on `device` (as a stage worker sets it) for this object's
// lifetime in the calling thread.
class AutocastScope {
 public:
  AutocastScope(c10::DeviceType device, bool bf16) : device_(device), on_(bf16) {
    if (on_) set_autocast(device_, true, c10::ScalarType::BFloat16);
  }
  ~AutocastScope() {
    if (on_) set_autocast(device_, false, c10::ScalarType::BFloat16);
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  c10::DeviceType device_;
  bool on_;
};

// Softmax attention over [B, heads, S, d]. torch 2.x has fused kernels (flash
// and memory-efficient attention on CUDA, a blocked loop on CPU) that never
// hold the S x S scores; 1.13 has none, so there it is two products and a softmax.
inline at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
#if TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, k, v);
#else
  const at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  return at::matmul(at::softmax(scores, -1), v);
#endif
}

// Waits for the device's queued work (CUDA), so a recorded end time means
// the work is done. 1.13 builds are CPU-only here, where there is nothing to wait for.
inline void synchronize(const c10::Device& device) {
#if TORCH_VERSION_MAJOR >= 2
  if (device.is_cuda()) c10::impl::getDeviceGuardImpl(device.type())->synchronizeDevice(device.index());
#else
  (void)device;
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

// Times a device's queued work by events on its current stream, converted
// to the host clock through an anchor taken where the queue is empty: a
// recorded time is when the device reached that point, with no wait per
// mark. CUDA only (on the CPU an operation has finished when it returns,
// so the host clock times it); 1.13 builds are CPU-only.
class EventClock {
 public:
  // Waits for the device's queued work, then anchors at `host_now_s`.
  EventClock(const c10::Device& device, double host_now_s) : device_(device), anchor_s_(host_now_s) {
#if TORCH_VERSION_MAJOR >= 2
    synchronize(device);
    mark();
#else
    throw Error("timing a " + device.str() + " device needs a torch 2.x build");
#endif
  }
  // An event at this point of the device's stream.
  void mark() {
#if TORCH_VERSION_MAJOR >= 2
    events_.emplace_back(device_.type(), c10::EventFlag::BACKEND_DEFAULT);
    events_.back().record(c10::impl::getDeviceGuardImpl(device_.type())->getStream(device_));
#endif
  }
  // Host-clock seconds of each mark() in order; waits for the last one.
  [[nodiscard]] std::vector<double> marks_s() const {
    std::vector<double> t;
#if TORCH_VERSION_MAJOR >= 2
    if (events_.size() < 2) return t;
    events_.back().synchronize();
    for (std::size_t i = 1; i < events_.size(); ++i)
      t.push_back(anchor_s_ + events_.front().elapsedTime(events_[i]) / 1000.0);
#endif
    return t;
  }

 private:
  c10::Device device_;
  double anchor_s_;
#if TORCH_VERSION_MAJOR >= 2
  std::vector<c10::Event> events_;  // [0]: the anchor
#endif
};

}  // namespace ep::exec::compat
