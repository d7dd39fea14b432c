// What `profile` and `validate`'s measured side share: one replica of a
// plan set up to run it, and ranks as threads of this process. The
// measured side itself (measure_iterations, declared in the torch-free
// exec/profiler.hpp that the commands include) is in replica_run.cpp.
#pragma once

#include <chrono>
#include <functional>
#include <vector>

#include "exec/data.hpp"
#include "exec/dist.hpp"
#include "exec/model.hpp"
#include "exec/optimizer.hpp"
#include "exec/pipeline.hpp"
#include "planner/config.hpp"
#include "planner/iteration.hpp"

namespace ep::exec {

// A batch of `b` random model inputs (images or token ids) on `dev`.
[[nodiscard]] at::Tensor stem_input(const ModelConfig& m, int b, const at::Device& dev);

// Replica `rank`'s K stages on devices of their own: GPUs rank * K + k on
// CUDA (check_measurable saw that many visible), its NCCL lanes on them.
[[nodiscard]] std::vector<at::Device> replica_devices(const Config& c, int K, int rank);

// `n` samples of the model's input shape: a batch's assembly costs the same
// whatever its values, so no dataset need be read.
[[nodiscard]] Dataset input_shaped(const Config& c, int n);

// Ranks as threads of this process, each its own Dist on loopback: the
// same Gloo code paths as separate processes. `body` gets its Dist, its
// rank and all n ranks (0..n-1). The first error of any rank is rethrown
// once all have ended.
void with_ranks(int n, std::chrono::milliseconds timeout,
                const std::function<void(Dist&, int, const std::vector<int>&)>& body);

// One replica of a plan set up to run it: its model, optimizer and
// pipeline on the replica's devices, a batch of random samples split into
// the program's micro-batches (already on the devices); with `dist`, its
// gradients all-reduced with the other replicas (rank `rank`). Made on the
// replica's thread, its GPU that thread's device (compat::use_device).
struct ReplicaRun {
  ReplicaRun(const Config& c, const IterationSetup& s, const std::vector<int>& micro_batches, Dist* dist, int rank);
  IterationResult run(const IterationProgram& program) { return pipe.run(program, mbs, batch, 1e-6); }

  Model model;
  exec::Optimizer opt;
  std::vector<at::Device> devices;
  Pipeline pipe;
  int batch;
  std::vector<MicroBatch> mbs;
};

}  // namespace ep::exec
