// Real training, one process driving one pipeline: the planner's plans
// carried out with LibTorch. At every freeze step the measured per-layer
// gradient norms go to the configured freeze policy, the RunPlanner plans the
// step, and the pipeline repartitions; the trainer itself decides nothing.
// Writes the same files as the simulator (traces/SCHEMA.md) plus the
// recorded gradient norms (replayable by the simulator), the plans and the
// final weights.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "planner/config.hpp"
#include "traces/trace.hpp"

namespace ep::exec {

struct TrainOptions {
  std::string out_dir;  // empty: write nothing
  // Progress within an epoch (fraction done), e.g. a terminal bar.
  std::function<void(double)> progress;
  // One line per epoch and per transition.
  std::function<void(const std::string&)> log;
};

struct TrainResult {
  std::vector<trace::EpochMetrics> epochs;
  std::vector<double> iteration_losses;  // every iteration, in order
  std::vector<std::vector<double>> grad_norms;  // per freeze step T = 1.., per layer
  double total_s = 0;                     // training wall time, evaluation excluded
  double final_accuracy = -1;
};

// Throws ep::Error (config errors name file:line and key) before any
// training when the config asks for what one process cannot run.
TrainResult train(const Config& config, const TrainOptions& options);

// "epoch 3/4  loss 0.4512  acc 84.31%  frozen 2/4  K 2  M 4  1234 samples/s"
[[nodiscard]] std::string format_epoch(const trace::EpochMetrics& m, int epochs, int L);

}  // namespace ep::exec
