// Host-to-device copies that overlap the work a device's current stream is
// still running: queued on a side stream, then ordered before the current
// stream's next work (the batch loader's copies, a cache read's).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <vector>

namespace ep::exec {

// Runs `queue(side)` (which queues work on `device`, e.g. non-blocking
// copies to or from pinned memory) with `side`, a side stream of `device`,
// current; the event marks the end of that work.
template <class Queue>
c10::Event on_side_stream(const c10::Device& device, Queue&& queue) {
  const c10::Stream side = c10::impl::getDeviceGuardImpl(device.type())->getStreamFromGlobalPool(device);
  c10::StreamGuard guard(side);
  queue(side);
  c10::Event done(device.type());
  done.record(side);
  return done;
}

// The blocks of `used` (those on `device`) are not handed out again by the
// allocator before `stream`'s work queued so far is done with them.
inline void used_on_stream(const c10::Device& device, const c10::Stream& stream,
                           const std::vector<const at::Tensor*>& used) {
  const c10::impl::DeviceGuardImplInterface* impl = c10::impl::getDeviceGuardImpl(device.type());
  for (const at::Tensor* t : used)
    if (t->defined() && t->device() == device) impl->recordDataPtrOnStream(t->storage().data_ptr(), stream);
}

// `device`'s current stream waits for `done` before its next work, and the
// blocks of `used` (the side stream's results on `device`) are kept for it.
inline void after_side_stream(const c10::Device& device, const c10::Event& done,
                              const std::vector<const at::Tensor*>& used) {
  const c10::Stream current = c10::impl::getDeviceGuardImpl(device.type())->getStream(device);
  done.block(current);
  used_on_stream(device, current, used);
}

}  // namespace ep::exec
