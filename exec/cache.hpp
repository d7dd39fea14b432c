// AutoCache's store, in this process's host memory: the frozen prefix's
// output per dataset index, tagged with the frozen sublayer depth it holds,
// so a read at the wrong depth is caught instead of training on stale
// activations. Part 1 runs one process, so the cache is private to it; the
// node-shared and disk tiers are issue 5's.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <mutex>
#include <vector>

namespace ep::exec {

class ActivationCache {
 public:
  explicit ActivationCache(std::int64_t dataset_size);

  // Entries for `indices` stacked on `device`; a masked slot (-1) reads
  // zeros. Throws ep::Error when an entry is missing or holds another depth.
  [[nodiscard]] at::Tensor read(const std::vector<std::int64_t>& indices, int depth, const at::Device& device);
  // Stores row i of `values` (on any device) for indices[i] >= 0.
  void write(const std::vector<std::int64_t>& indices, const at::Tensor& values, int depth);

 private:
  std::mutex mutex_;
  std::vector<at::Tensor> entries_;
  std::vector<int> depth_;
  std::vector<std::int64_t> entry_shape_;
};

}  // namespace ep::exec
