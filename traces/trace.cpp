#include "traces/trace.hpp"

#include <algorithm>

namespace ep::trace {

int Trace::track(const Track& t) {
  const auto it = std::find(tracks.begin(), tracks.end(), t);
  if (it != tracks.end()) return static_cast<int>(it - tracks.begin());
  tracks.push_back(t);
  return static_cast<int>(tracks.size()) - 1;
}

}  // namespace ep::trace
