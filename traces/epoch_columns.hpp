// Internal to traces/: the EpochMetrics fields by name, in declaration order.
// The one encoding of an epoch's metrics: the CSV's columns and the run
// state's epoch objects both come from it.
#pragma once

#include "traces/trace.hpp"

namespace ep::trace::detail {

template <class M, class F>
void visit_columns(M& m, F&& f) {
  f("source", m.source);
  f("mode", m.mode);
  f("epoch", m.epoch);
  f("plan_id", m.plan_id);
  f("frozen_layers", m.frozen_layers);
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
