// The measurements a plan needs, taken by rank 0 and handed to the planner
// (which decides): chunk-search candidates timed for real, with a memo on
// disk per environment, and the cache probe behind AutoCache. Timed with
// exec/timing.hpp's rule.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "exec/cache.hpp"
#include "exec/job.hpp"
#include "exec/model.hpp"
#include "exec/pipeline.hpp"
#include "planner/autopipe.hpp"
#include "planner/cache_policy.hpp"
#include "planner/config.hpp"
#include "traces/chunk_memo.hpp"

namespace ep::exec {

// Median seconds of `runs` iterations of `program` (a timing_program of
// the planner's) on `pipeline`, reconfigured for it.
double time_chunk_candidate(Pipeline& pipeline, const Dataset& train, const IterationProgram& program, int runs);

// The run's start (planner/transition.hpp): `start` (a start_program)
// kStartIterations times on the batch `request` asks for, as an epoch queues
// iterations (each before the one before is read, the next batch assembled
// meanwhile); the last one's next batch is `then`; then the first
// optimizer step's one-off work (Pipeline::prepare_step) and, on a GPU, the
// set-up of the probe's device timer. Trainer::start runs it,
// and profile times it: one procedure, so what the profile measures is
// what a run's start does.
void run_start_iterations(Pipeline& pipeline, BatchLoader& loader, const IterationProgram& start,
                          const BatchLoader::Request& request, const BatchLoader::Request& then, double real_samples);

// Measured chunk timings kept across runs (exec.chunk_memo, or
// ~/.cache/elasticpipe/chunk_memo.json), keyed by this machine's
// environment and a digest of the timed programs' own text (program_text:
// partition, frozen layers, schedule, micro-batches, threads, ...), so a
// search at one freeze step never answers another's.
class ChunkMemo {
 public:
  ChunkMemo(const Config& config, int cores);
  // Empty when not recorded.
  [[nodiscard]] std::vector<double> find(const std::vector<IterationProgram>& programs) const;
  void add(const std::vector<IterationProgram>& programs, const std::vector<double>& times) const;
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  [[nodiscard]] trace::ChunkMemoKey key(const std::vector<IterationProgram>& programs) const;
  std::string environment_, path_;
};

// AutoCache's measurement at a frozen depth: reading a batch of entries
// from a probe file vs running the batch through the frozen prefix on
// `device` at the training precision (`bf16`: autocast), both timed on that
// device. The batch (on the device) and the probe file (`path`, removed
// with this object) are kept for the next, deeper depth, so a freeze step
// pays for what it measures, not for a new file's first writes.
class CacheProbe {
 public:
  CacheProbe(const Dataset& train, int batch, const at::Device& device, bool bf16, std::string path,
             std::vector<std::int64_t> entry_shape);
  // The same with its batch given, already on the device (the profiler's).
  CacheProbe(at::Tensor input, bool bf16, std::string path, std::vector<std::int64_t> entry_shape);
  ~CacheProbe();
  CacheProbe(const CacheProbe&) = delete;
  CacheProbe& operator=(const CacheProbe&) = delete;
  // At `frozen` layers (deeper than any measured before), each sublayer
  // where it is now (`device_of(sublayer)`).
  MeasuredCache measure(Model& model, int frozen, const std::function<at::Device(int)>& device_of);
  // A measure()'s parts on the host's clock, warm-up runs included: its
  // frozen forwards, its untimed write of the batch's rows into the file
  // (from a GPU, through pinned memory), its reads. A first probe's extra
  // time shows in the part that pays it.
  struct Parts {
    double forward_s = 0, write_s = 0, read_s = 0;
    Parts& operator+=(const Parts& o) {
      forward_s += o.forward_s, write_s += o.write_s, read_s += o.read_s;
      return *this;
    }
  };
  [[nodiscard]] const Parts& last_parts() const { return last_; }

 private:
  at::Tensor input_;
  at::Device device_;
  bool bf16_;
  std::vector<std::int64_t> rows_;
  std::unique_ptr<ActivationCache> file_;
  Parts last_;
};

}  // namespace ep::exec
