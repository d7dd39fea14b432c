// The one place where LibTorch 1.13 (Debian, CPU) and 2.x (PyPI's torch
// wheel, CUDA; the default build) differ for us. Everything else in exec/ is
// written against the API both share.
#pragma once

#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <c10/core/Device.h>
#include <c10/core/DeviceType.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/ScalarType.h>
#include <torch/csrc/api/include/torch/version.h>

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

// Waits for the device's queued work (CUDA), so a recorded end time means
// the work is done. 1.13 builds are CPU-only here, where there is nothing to wait for.
inline void synchronize(const c10::Device& device) {
#if TORCH_VERSION_MAJOR >= 2
  if (device.is_cuda()) c10::impl::getDeviceGuardImpl(device.type())->synchronizeDevice(device.index());
#else
  (void)device;
#endif
}

}  // namespace ep::exec::compat
