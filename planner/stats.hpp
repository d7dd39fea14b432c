// Summary statistics shared by the back ends and the benchmarks.
#pragma once

#include <algorithm>
#include <vector>

namespace ep {

// The upper median (the middle element, or the upper of the two middle
// ones): always a measured value, never an average of two. 0 when empty.
[[nodiscard]] inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

}  // namespace ep
