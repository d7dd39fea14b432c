#include "exec/cache.hpp"

#include <ATen/ATen.h>

#include "planner/error.hpp"

namespace ep::exec {

ActivationCache::ActivationCache(std::int64_t dataset_size)
    : entries_(static_cast<std::size_t>(dataset_size)), depth_(static_cast<std::size_t>(dataset_size), -1) {}

at::Tensor ActivationCache::read(const std::vector<std::int64_t>& indices, int depth, const at::Device& device) {
  std::vector<at::Tensor> rows;
  rows.reserve(indices.size());
  {
    std::lock_guard lock(mutex_);
    for (const std::int64_t i : indices) {
      if (i < 0) {
        if (entry_shape_.empty()) throw Error("activation cache: read before any entry was written");
        rows.push_back(at::zeros(entry_shape_, at::kFloat));
        continue;
      }
      if (i >= static_cast<std::int64_t>(entries_.size()) || depth_[i] != depth)
        throw Error("activation cache: sample " + std::to_string(i) + " holds depth " +
                    std::to_string(i < static_cast<std::int64_t>(depth_.size()) ? depth_[i] : -1) +
                    ", expected " + std::to_string(depth));
      rows.push_back(entries_[i]);
    }
  }
  return at::stack(rows).to(device);
}

void ActivationCache::write(const std::vector<std::int64_t>& indices, const at::Tensor& values, int depth) {
  const at::Tensor host = values.detach().to(at::kCPU, at::kFloat);
  std::lock_guard lock(mutex_);
  for (std::size_t k = 0; k < indices.size(); ++k) {
    const std::int64_t i = indices[k];
    if (i < 0) continue;
    if (i >= static_cast<std::int64_t>(entries_.size()))
      throw Error("activation cache: sample index " + std::to_string(i) + " out of range");
    entries_[i] = host[static_cast<std::int64_t>(k)].clone();
    depth_[i] = depth;
    if (entry_shape_.empty()) entry_shape_ = entries_[i].sizes().vec();
  }
}

}  // namespace ep::exec
