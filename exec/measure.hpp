// The measurements a plan needs, taken by rank 0 and handed to the planner
// (which decides): chunk-search candidates timed for real, with a memo on
// disk per environment, and the cache probe behind AutoCache. Timed with
// exec/timing.hpp's rule.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "exec/job.hpp"
#include "exec/model.hpp"
#include "exec/pipeline.hpp"
#include "planner/autopipe.hpp"
#include "planner/cache_policy.hpp"
#include "planner/config.hpp"

namespace ep::exec {

// Median seconds of `runs` iterations of `program` (a timing_program of
// the planner's) on `pipeline`, reconfigured for it.
double time_chunk_candidate(Pipeline& pipeline, const Dataset& train, const IterationProgram& program, int runs);

// Measured chunk timings kept across runs (exec.chunk_memo, or
// ~/.cache/elasticpipe/chunk_memo.json), keyed by this machine's
// environment, K, the batch and the candidates' M.
class ChunkMemo {
 public:
  ChunkMemo(const Config& config, int cores);
  // Empty when not recorded.
  [[nodiscard]] std::vector<double> find(const std::vector<IterationProgram>& programs) const;
  void add(const std::vector<IterationProgram>& programs, const std::vector<double>& times) const;

 private:
  [[nodiscard]] nlohmann::json key(const std::vector<IterationProgram>& programs) const;
  const Config& c_;
  std::string environment_, path_;
};

// AutoCache's measurement at `frozen` layers: reading a batch of entries
// from a probe file (`probe_path`, removed after) vs running the batch
// through the frozen prefix on `device` at the training precision (`bf16`:
// autocast), both timed on that device.
MeasuredCache probe_cache(Model& model, const Dataset& train, int batch, int frozen, const at::Device& device, bool bf16,
                          const std::string& probe_path, const std::vector<std::int64_t>& entry_shape);

}  // namespace ep::exec
