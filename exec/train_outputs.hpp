// What a training writes: its timeline (traced iterations and transitions
// on per-device tracks) and, at the end, rank 0's output files, committed
// together (traces/SCHEMA.md has every format).
#pragma once

#include <string>

#include "exec/launch.hpp"
#include "exec/model.hpp"
#include "exec/pipeline.hpp"
#include "exec/trainer.hpp"
#include "planner/run_plan.hpp"
#include "traces/trace.hpp"

namespace ep::exec {

class Dist;

// Traced actions as trace events on per-device tracks; a send and its
// receive share a flow id.
class TraceRecorder {
 public:
  TraceRecorder(const Config& config, const ProcessEnv& env, int cores);
  // `replica`: the pipeline that ran it (its node and devices, as the plan's
  // layout places them).
  void add(const IterationResult& r, const Plan& plan, int epoch, int iteration,
           const ReplicaLayout::Replica& replica);
  // Every process's traced iterations onto rank 0's timeline (the other
  // ranks send theirs). The ranks leave the end-of-training barrier together:
  // each one's spans are shifted so that its `barrier_s` (when it left, on
  // its own clock) falls on rank 0's.
  void gather(Dist& dist, double barrier_s);
  void transition(double start_s, double end_s, int epoch, const std::string& what);
  void note(const std::string& key, const std::string& value) { trace_.metadata[key] = value; }
  void note_start(double start_s) { trace::note_start(trace_, start_s); }
  [[nodiscard]] const trace::Trace& trace() const { return trace_; }

 private:
  trace::Trace trace_;
  std::int64_t next_flow_ = 1;
  std::string device_prefix_;
  int rank_ = 0;
};

// trace.json, summary.json, grad_norms.csv, plan.json, transitions.json,
// iterations.csv and weights.bin in `out_dir`, and where the model came
// from a Hugging Face checkpoint (model.checkpoint) hf/config.json and
// hf/model.safetensors (its classification architecture, labelled with
// `class_names` where the data has them): every file written before any is
// renamed into place, so a failure (a full disk) leaves the previous run's
// set, never a mix or a partial file.
void write_run_outputs(const std::string& out_dir, const Config& config, const TraceRecorder& timeline,
                       const TrainResult& result, const RunPlanner& planner, std::int64_t train_samples,
                       const Model& model, const std::vector<std::string>& class_names);

}  // namespace ep::exec
