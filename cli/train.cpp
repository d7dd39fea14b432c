// elasticpipe train: real training with LibTorch, one process per
// pipeline (--nproc N here, or under torchrun/mpirun).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include "cli/common.hpp"
#include "cli/exec_commands.hpp"
#include "exec/blas.hpp"
#include "exec/launch.hpp"
#include "exec/trainer.hpp"
#include "traces/output_dir.hpp"

namespace ep::cli {

namespace {

// The pipe the ranks of `train --nproc` send their error lines to (see
// print_error): the write end is inherited and non-blocking (a rank never
// waits on a full pipe; the first lines are the ones that matter).
class ErrorPipe {
 public:
  ErrorPipe() {
    if (::pipe2(fds_, O_CLOEXEC | O_NONBLOCK) != 0 || ::fcntl(fds_[1], F_SETFD, 0) != 0)
      throw Error(std::string("train --nproc: cannot create the ranks' error pipe: ") + std::strerror(errno));
  }
  ~ErrorPipe() {
    for (const int fd : fds_)
      if (fd >= 0) ::close(fd);
  }
  ErrorPipe(const ErrorPipe&) = delete;
  ErrorPipe& operator=(const ErrorPipe&) = delete;

  [[nodiscard]] int write_end() const { return fds_[1]; }
  // Once every rank has exited: the first line written, "" when none was.
  [[nodiscard]] std::string first_line() {
    ::close(fds_[1]);
    fds_[1] = -1;
    std::string text;
    char buf[4096];
    for (ssize_t n; text.find('\n') == std::string::npos && (n = ::read(fds_[0], buf, sizeof buf)) > 0;)
      text.append(buf, static_cast<std::size_t>(n));
    const auto end = text.find('\n');  // print_error writes whole lines
    return end == std::string::npos ? "" : text.substr(0, end + 1);
  }

 private:
  int fds_[2] = {-1, -1};
};

// `train --nproc N`: this process becomes the launcher of N copies of
// itself (same arguments minus --nproc), which find their rank in the
// environment as under torchrun; the job's exit code is the first failure's.
// Whatever ends the job (a failed or killed rank, Ctrl-C), the node-shared
// cache files its ranks created are removed before returning.
int launch_train(const TrainArgs& a, const Config& config, const exec::ProcessEnv& env,
                 const std::string& out, int argc, char** argv) {
  exec::LaunchOptions o;
  o.nproc = a.nproc;
  o.master_port = env.master_port;  // MASTER_PORT when set, else a free port
  o.program = std::filesystem::canonical("/proc/self/exe").string();
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--nproc") {
      ++i;
      continue;
    }
    if (arg.rfind("--nproc=", 0) == 0) continue;
    o.args.push_back(arg);
  }
  ErrorPipe errors;
  o.env.push_back({kErrorFdVariable, std::to_string(errors.write_end())});
  const exec::LaunchResult r = exec::launch_local(o);
  (void)exec::remove_cache_files(config, out);
  if (r.exit_code == 0) return 0;
  // One failure, one line: the first error a rank met, else why a rank
  // ended without one (a signal).
  if (const std::string line = errors.first_line(); !line.empty())
    std::fputs(line.c_str(), stderr);
  else
    print_error("training job failed: " + r.reason);
  return r.exit_code;
}

// A single training process removes its cache files when Ctrl-C or SIGTERM
// ends it: unlink(2) is async-signal-safe, the names are fixed beforehand.
std::vector<std::string> g_cache_files;
extern "C" void remove_cache_files_and_die(int sig) {
  for (const std::string& f : g_cache_files) ::unlink(f.c_str());
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void remove_cache_files_on_signals(const Config& config, const std::string& out) {
  g_cache_files.clear();
  for (const std::string& f : exec::cache_file_names(config, out, 0)) g_cache_files.push_back(f);
  for (const int sig : {SIGINT, SIGTERM, SIGHUP})
    if (std::signal(sig, remove_cache_files_and_die) == SIG_IGN) std::signal(sig, SIG_IGN);  // nohup stays nohup
}

int run_train(const TrainArgs& a, int argc, char** argv) {
  const Config config = load_config(a.config, a.overrides);  // bad input fails before any process starts
  const exec::ProcessEnv env = exec::detect_process_env();
  if (!env.warning.empty() && env.rank == 0) std::cerr << "WARNING: " << env.warning << "\n";
  if (const std::string w = exec::blas_warning(); !w.empty() && env.rank == 0)
    std::cerr << "WARNING: " << w << "\n";
  if (a.nproc > 0 && env.launcher != "single")
    throw Error("--nproc " + std::to_string(a.nproc) + " inside a job already launched by " + env.launcher +
                    " (rank " + std::to_string(env.rank) + " of " + std::to_string(env.world_size) +
                    "): drop --nproc");
  if (a.nproc > 1) {
    try {
      exec::check_process_count(config, a.nproc);  // before any process starts
    } catch (const Error& e) {
      throw e.with_context("--nproc " + std::to_string(a.nproc));
    }
  }
  const std::string out = a.out.empty() ? default_out(a.config, "train") : a.out;
  // One job per output folder: the launcher (or rank 0 of torchrun/mpirun)
  // holds it; our own launcher's ranks run under its lock.
  std::optional<OutputDirLock> lock;
  if (env.launcher != "elasticpipe" && env.rank == 0) lock.emplace(out, command_line(), "--out");
  if (a.nproc > 1) return launch_train(a, config, env, out, argc, argv);
  if (env.launcher == "single") remove_cache_files_on_signals(config, out);
  exec::TrainOptions opt;
  opt.out_dir = out;
  opt.process = env;
  opt.resume = a.resume;
  if (env.rank == 0) {
    opt.progress = progress_bar("training");
    opt.log = [](const std::string& line) { std::cout << line << std::endl; };
  }
  exec::TrainResult r;
  try {
    r = exec::train(config, opt);
  } catch (...) {
    if (env.launcher == "single") (void)exec::remove_cache_files(config, out);
    throw;
  }
  if (env.rank != 0) return 0;
  std::printf("trained %d epochs in %.1f s, final test accuracy %.2f%%\n", config.training.epochs, r.total_s,
              100 * r.final_accuracy);
  std::cout << "wrote " << out
            << "/{summary.json,epochs.csv,trace.json,grad_norms.csv,plan.json,transitions.json,iterations.csv,weights.bin,checkpoints}\n";
  return 0;
}

}  // namespace

Command add_train(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  return {add_train_options(app, *a), [a](int argc, char** argv) { return run_train(*a, argc, argv); }};
}

}  // namespace ep::cli
