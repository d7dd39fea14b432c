// What a training job needs before its Trainer: the checks refused before
// any work, its data, its devices, and the names of its node-shared cache
// files (which the launcher removes after a kill).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "exec/data.hpp"
#include "exec/launch.hpp"
#include "exec/pipeline.hpp"
#include "planner/cache_policy.hpp"
#include "planner/config.hpp"

namespace ep::exec {

// What this job cannot run (dataset, model, replicas for one process,
// memory, CUDA), refused with the config's file:line before any work.
void check_runnable(const Config& config, const ProcessEnv& env);

// NCCL refuses two ranks of one communicator on one device: with
// exec.device = "cuda" and `visible` GPUs per process, every lane (stage k
// of each replica) of every layout the run can reach must put its ranks on
// distinct GPUs. Refused naming the ranks, the device and the layout.
void check_gpus_not_shared(const Config& config, int visible);

struct Data {
  Dataset train, test;
};
[[nodiscard]] Data load_data(const Config& config);

// The samples of `indices` (-1: a masked slot, zeros with weight 0).
[[nodiscard]] MicroBatch make_batch(const Dataset& d, std::vector<std::int64_t> indices);

// `batch` samples of `d` from index 0 on (wrapping), for timing.
[[nodiscard]] std::vector<std::int64_t> first_samples(const Dataset& d, int batch);

// The first plan's devices (K0 of them); a plan moves them to its replica's GPUs.
[[nodiscard]] std::vector<at::Device> devices(const Config& config);

// The node-shared cache file `name` of the job writing to `out_dir`, in the
// tier's folder (created when missing).
[[nodiscard]] std::string cache_path(const Config& config, const std::string& out_dir, CacheTier tier,
                                     const std::string& name);

// "0123456789abcdef": 16 hex digits.
[[nodiscard]] std::string hex(std::uint64_t v);

}  // namespace ep::exec
