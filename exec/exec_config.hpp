// The executor's section of a config, [exec]: how it runs, never what it
// decides (the plan does). Read and checked here, without LibTorch, so
// that `elasticpipe` refuses a bad [exec] before it hands a run over. The
// two facts of [exec] the planner plans with, exec.device and
// exec.threads_per_worker, are the Config's (Config::device,
// Config::threads_per_worker).
#pragma once

#include <string>

#include "planner/config.hpp"

namespace ep::exec {

struct ExecConfig {
  int trace_iterations = 2;    // iterations traced (every action) at the start of each epoch
  int eval_batch_size = 0;     // test-set batch; 0: training.batch_size
  // Multi-process (train --nproc / torchrun / mpirun).
  double collective_timeout_s = 300;  // any collective or state transfer; then the job fails naming rank and operation
  int checkpoint_every = 0;      // iterations between checkpoints (0: at epoch ends only); written under <out>/checkpoints
  int checkpoint_keep = 2;       // newest checkpoints kept
  // AutoCache's node-shared file: host-memory tier on a tmpfs, disk tier on
  // disk (empty: <out>/cache, else the system temp dir).
  std::string cache_memory_dir = "/dev/shm";
  std::string cache_disk_dir;
  int prefetch_iterations = 2;   // disk tier: entries read ahead, in the sampler's order
  // Chunk search: timed iterations per candidate M (after one warm-up); 0:
  // the cost model ranks the candidates. Results memoised in chunk_memo
  // (empty: ~/.cache/elasticpipe/chunk_memo.json) per (environment, K, batch).
  int chunk_search_iterations = 2;
  std::string chunk_memo;
  bool record_samples = false;   // audit: <out>/samples/rank<r>.csv, every sample each replica trained on
};

// [exec] of the config's document (the defaults for a Config built in code,
// which has none). Throws ep::Error naming file:line, the
// key, what was expected and what was found; an unknown key of [exec] is
// such an error.
[[nodiscard]] ExecConfig read_exec_config(const Config&);

// settings_text (planner/config.hpp) without [exec]'s paths either: what
// the processes of one job compare.
[[nodiscard]] std::string job_settings(const Config&);

}  // namespace ep::exec
