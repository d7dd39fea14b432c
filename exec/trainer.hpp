// Real training: the planner's plans carried out with LibTorch, by one
// process (one pipeline) or by one process per potential pipeline
// (`train --nproc N`, torchrun, mpirun: AutoDP across processes on c10d).
// At every freeze step rank 0 hands the measured per-layer gradient norms
// to the configured freeze policy, every process's RunPlanner plans the step
// with the same inputs (so all hold the same plan), newly active processes
// receive the training state from a live replica, the active group is
// rebuilt, and the pipelines repartition; the trainer itself decides
// nothing. Rank 0 writes the same files as the simulator (traces/SCHEMA.md)
// plus the recorded gradient norms (replayable by the simulator), the plans,
// the transitions, checkpoints and the final weights.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "exec/launch.hpp"
#include "planner/config.hpp"
#include "traces/run_outputs.hpp"
#include "traces/trace.hpp"

namespace ep::exec {

// Where an epoch stands, after each iteration rank 0 records.
struct EpochProgress {
  int epoch = 1, epochs = 1;          // from 1
  std::int64_t iteration = 0;         // iterations of the epoch done, from 1
  std::int64_t iterations = 0;        // the epoch's
  double loss = 0;                    // mean over the epoch's samples so far (all replicas)
  double samples_per_s = 0;           // since the epoch (or its resume) began, all replicas
  double left_s = 0;                  // the epoch's time left at that pace
};

struct TrainOptions {
  std::string out_dir;  // empty: write nothing (and no checkpoints)
  // Progress within an epoch, e.g. a terminal bar. Rank 0 only.
  std::function<void(const EpochProgress&)> progress;
  // One line per epoch and per transition. Rank 0 only.
  std::function<void(const std::string&)> log;
  ProcessEnv process;  // this process's place in the job (single by default)
  std::string resume;  // a checkpoint directory to continue from
  // Called with a failure of this process while its connections to the
  // other ranks are still open, before it is torn down; the failure is then
  // thrown on. A peer fails only when those connections close, so the job's
  // first report is its cause, not a peer's consequence of it.
  std::function<void(const std::exception&)> report_error;
};

// What a transition cost, dissected (rank 0's view; transitions.json).
using TransitionCost = trace::TransitionCost;

struct TrainResult {
  std::vector<trace::EpochMetrics> epochs;
  std::vector<double> iteration_losses;  // every iteration, in order (the global batch's loss)
  std::vector<std::vector<double>> grad_norms;  // per freeze step T = 1.., per layer
  std::vector<TransitionCost> transitions;
  double start_s = 0;                     // this process's start, before its first epoch (RunBackend::start)
  // Training wall time, evaluation excluded: the start and the epochs (a
  // resumed run's: each process's start and every epoch, before it too).
  double total_s = 0;
  double final_accuracy = -1;
  bool ran = false;  // false on a process that was never active (it has nothing to report)
};

// Throws ep::Error (config errors name file:line and key) before any
// training when the config asks for what this job cannot run.
TrainResult train(const Config& config, const TrainOptions& options);

// A job trains with one process (one pipeline) or one per device of the
// config's cluster; anything else is an ep::Error saying which.
void check_process_count(const Config& config, int processes);

// Removes the node-shared activation cache files of the job writing to
// `out_dir` (exec.cache_memory_dir, exec.cache_disk_dir): what a job that
// was killed or interrupted leaves behind. Returns the paths removed.
std::vector<std::string> remove_cache_files(const Config& config, const std::string& out_dir);
// The cache files process `rank` of that job may create, named beforehand
// (for a signal handler, which cannot list a folder).
std::vector<std::string> cache_file_names(const Config& config, const std::string& out_dir, int rank);

// "epoch 3/4  loss 0.4512  acc 84.31%  frozen 2/4  K 2  M 4  1234 samples/s"
[[nodiscard]] std::string format_epoch(const trace::EpochMetrics& m, int epochs, int L);

}  // namespace ep::exec
