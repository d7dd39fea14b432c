// Internal to traces/: the EpochMetrics fields by name, in declaration order.
// The one encoding of an epoch's metrics: the CSV's columns and the run
// state's epoch objects both come from it.
#pragma once

#include <string_view>

#include "traces/trace.hpp"

namespace ep::trace::detail {

// Columns a file written before them lacks: read as their default.
inline constexpr const char* kLaterColumns[] = {"frozen_inside"};

[[nodiscard]] inline bool is_later_column(std::string_view name) {
  for (const char* c : kLaterColumns)
    if (name == c) return true;
  return false;
}

// frozen_inside: "-", or layers as "4 7" (ascending, one space apart).
[[nodiscard]] inline bool valid_layer_list(std::string_view s) {
  if (s == "-") return true;
  long previous = -1, value = -1;
  for (std::size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == ' ') {
      if (value <= previous) return false;
      previous = value;
      value = -1;
    } else if (s[i] >= '0' && s[i] <= '9' && value < (1L << 30)) {
      value = (value < 0 ? 0 : value * 10) + (s[i] - '0');
    } else {
      return false;
    }
  }
  return true;
}

template <class M, class F>
void visit_columns(M& m, F&& f) {
  f("source", m.source);
  f("mode", m.mode);
  f("epoch", m.epoch);
  f("plan_id", m.plan_id);
  f("frozen_layers", m.frozen_layers);
  f("frozen_inside", m.frozen_inside);
  f("K", m.K);
  f("M", m.M);
  f("replicas", m.replicas);
  f("cache", m.cache);
  f("epoch_s", m.epoch_s);
  f("iteration_s", m.iteration_s);
  f("samples_per_s", m.samples_per_s);
  f("bubble_fraction", m.bubble_fraction);
  f("exposed_comm_s", m.exposed_comm_s);
  f("comm_s", m.comm_s);
  f("compute_s", m.compute_s);
  f("cache_hit_ratio", m.cache_hit_ratio);
  f("transition_s", m.transition_s);
  f("loss", m.loss);
  f("accuracy", m.accuracy);
}

}  // namespace ep::trace::detail
