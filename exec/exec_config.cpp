#include "exec/exec_config.hpp"

#include <climits>

#include "planner/config_reader.hpp"

namespace ep::exec {
namespace {

ExecConfig read(config_reader::Reader& r, const Config& c) {
  ExecConfig e;
  for (const auto& [key, pos] : c.positions)  // exec.device, exec.threads_per_worker: the planner's
    if (key.rfind("exec.", 0) == 0) r.known(key);
  r.integer("exec.trace_iterations", e.trace_iterations, false, 0, 1000000, "iterations traced per epoch");
  r.integer("exec.eval_batch_size", e.eval_batch_size, false, 0, 1 << 24, "samples per evaluation batch");
  r.quantity("exec.collective_timeout_s", e.collective_timeout_s, false, 1e-3, 1e6,
             "seconds, a millisecond to 11 days");
  r.integer("exec.checkpoint_every", e.checkpoint_every, false, 0, INT_MAX, "iterations, a 32-bit count");
  r.integer("exec.checkpoint_keep", e.checkpoint_keep, false, 1, 1000, "checkpoints kept on disk");
  r.path("exec.cache_memory_dir", e.cache_memory_dir);
  r.path("exec.cache_disk_dir", e.cache_disk_dir);
  r.integer("exec.prefetch_iterations", e.prefetch_iterations, false, 0, 1024, "iterations read ahead");
  r.integer("exec.chunk_search_iterations", e.chunk_search_iterations, false, 0, 1000,
            "timed iterations per candidate M");
  r.path("exec.chunk_memo", e.chunk_memo);
  r.boolean("exec.record_samples", e.record_samples);
  r.reject_unknown_in("exec");
  return e;
}

}  // namespace

ExecConfig read_exec_config(const Config& c) {
  if (!c.document) return {};  // a Config built in code, not read: the defaults
  config_reader::Reader r(*c.document);
  return read(r, c);
}

std::string job_settings(const Config& c) {
  if (!c.document) throw Error("job_settings: a config built in code has no settings to compare");
  config_reader::Reader r(*c.document);
  (void)read(r, c);
  return settings_text(c, r.path_keys());
}

}  // namespace ep::exec
