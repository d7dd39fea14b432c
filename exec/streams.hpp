// Work beside a device's current stream: copies between the host and the
// device that overlap what the stream is still running, queued on a side
// stream, then ordered before the current stream's next work (the batch
// loader's copies, a cache read's) or after the work that made their source
// (a cache write's); and the event that times a collective's end.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "exec/torch_compat.hpp"

namespace ep::exec {

// What a side stream carries: copies one way, or only the wait for a
// collective and the event after it (so that event's time is its end).
enum class SideUse { CopyToDevice, CopyFromDevice, CollectiveEnd };

// The device's one side stream for `use`, the same on every call. The
// caching allocator hands a block out again only on the stream it was
// allocated on: a fresh stream from torch's pool of 32 per copy would cache
// up to 32 copies of a batch's blocks. One per use, so that copies to the
// device never queue behind copies from it, which wait for their rows to
// be made, and a collective's end event waits for nothing else. From the
// high-priority pool: c10d's NCCL communicators take their streams from the
// low-priority one, round robin over 32, so after a few dozen rebuilt
// groups a side stream of that pool would be a collective's stream too.
inline c10::Stream side_stream(const c10::Device& device, SideUse use) {
  static std::mutex mu;
  static std::map<std::tuple<int, int, int>, c10::Stream> streams;
  const c10::Device d = compat::indexed(device);
  const auto key = std::make_tuple(static_cast<int>(d.type()), static_cast<int>(d.index()), static_cast<int>(use));
  std::lock_guard lock(mu);
  auto it = streams.find(key);
  if (it == streams.end())
    it = streams.emplace(key, c10::impl::getDeviceGuardImpl(d.type())->getStreamFromGlobalPool(d, /*isHighPriority=*/true)).first;
  return it->second;
}

// Runs `queue(side)` (which queues work on `device`, e.g. non-blocking
// copies to or from pinned memory) with `side`, the device's side stream
// for `use`, current; the event marks the end of that work.
template <class Queue>
c10::Event on_side_stream(const c10::Device& device, SideUse use, Queue&& queue) {
  const c10::Stream side = side_stream(device, use);
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
  const c10::Device d = compat::indexed(device);
  const c10::impl::DeviceGuardImplInterface* impl = c10::impl::getDeviceGuardImpl(d.type());
  for (const at::Tensor* t : used)
    if (t->defined() && t->device() == d) impl->recordDataPtrOnStream(t->storage().data_ptr(), stream);
}

// `device`'s current stream waits for `done` before its next work, and the
// blocks of `used` (the side stream's results on `device`) are kept for it.
inline void after_side_stream(const c10::Device& device, const c10::Event& done,
                              const std::vector<const at::Tensor*>& used) {
  const c10::Device d = compat::indexed(device);
  const c10::Stream current = c10::impl::getDeviceGuardImpl(d.type())->getStream(d);
  done.block(current);
  used_on_stream(d, current, used);
}

}  // namespace ep::exec
