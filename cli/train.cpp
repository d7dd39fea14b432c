// elasticpipe train: real training with LibTorch, one process per
// pipeline (--nproc N here, or under torchrun/mpirun).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string_view>

#include "cli/common.hpp"
#include "cli/exec_commands.hpp"
#include "exec/blas.hpp"
#include "exec/launch.hpp"
#include "exec/trainer.hpp"
#include "traces/output_dir.hpp"

namespace ep::cli {

namespace {

// "42 s", "3 min 05 s", "2 h 07 min".
std::string duration_text(double s) {
  const auto t = static_cast<long long>(std::llround(std::max(0.0, s)));
  char out[48];
  if (t < 60)
    std::snprintf(out, sizeof out, "%lld s", t);
  else if (t < 3600)
    std::snprintf(out, sizeof out, "%lld min %02lld s", t / 60, t % 60);
  else
    std::snprintf(out, sizeof out, "%lld h %02lld min", t / 3600, t / 60 % 60);
  return out;
}

// Training's progress within an epoch: on a terminal, a bar on stderr with
// the epoch's loss so far, its pace and its time left; in a log (stdout not
// a terminal), the same as a line every `every_s` of an epoch, so that a
// long epoch is never silent and a short one prints only its epoch line.
std::function<void(const exec::EpochProgress&)> train_progress(double every_s) {
  using Clock = std::chrono::steady_clock;
  const bool tty = isatty(STDOUT_FILENO) != 0;
  auto last = std::make_shared<Clock::time_point>(Clock::now());
  const auto every = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(every_s));
  return [tty, last, every](const exec::EpochProgress& e) {
    const Clock::time_point now = Clock::now();
    if (e.iteration <= 1) *last = now;  // each epoch counts its own interval
    const double pct = 100.0 * static_cast<double>(e.iteration) / static_cast<double>(std::max<std::int64_t>(1, e.iterations));
    char stats[160];
    std::snprintf(stats, sizeof stats, "loss %.4f  %.0f samples/s  about %s left in the epoch", e.loss, e.samples_per_s,
                  duration_text(e.left_s).c_str());
    if (tty) {
      std::fprintf(stderr, "\r\033[Kepoch %d/%d %s  %s", e.epoch, e.epochs, bar_text(pct / 100, 20).c_str(), stats);
      if (e.iteration >= e.iterations) std::fprintf(stderr, "\r\033[K");
      std::fflush(stderr);
    } else if (now - *last >= every && e.iteration < e.iterations) {
      *last = now;
      std::printf("epoch %d/%d  %lld/%lld iterations (%.0f%%)  %s\n", e.epoch, e.epochs,
                  static_cast<long long>(e.iteration), static_cast<long long>(e.iterations), pct, stats);
      std::fflush(stdout);
    }
  };
}

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
  struct Reported {
    int exit_code = 0;
    std::string line;  // "ERROR: ...\n"
  };
  // Once every rank has exited: the first error reported as a cause, and the
  // first met communicating with other ranks (print_error's two kinds).
  struct Reports {
    std::optional<Reported> cause, peer;
  };
  [[nodiscard]] Reports read() {
    ::close(fds_[1]);
    fds_[1] = -1;
    std::string text;  // the pipe's capacity at most: the ranks never wait on it
    char buf[4096];
    for (ssize_t n; (n = ::read(fds_[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(n));
    Reports out;
    // print_error writes whole lines: "<exit code> <cause|peer> ERROR: ...\n".
    for (std::size_t at = 0, end; (end = text.find('\n', at)) != std::string::npos; at = end + 1) {
      const std::string_view line(text.data() + at, end + 1 - at);
      const auto space = line.find(' ');
      Reported r;
      const auto [ptr, ec] = std::from_chars(line.data(), line.data() + std::min(space, line.size()), r.exit_code);
      if (space == std::string_view::npos || ec != std::errc() || ptr != line.data() + space || r.exit_code <= 0)
        continue;
      const std::string_view rest = line.substr(space + 1);
      const bool peer = rest.rfind("peer ", 0) == 0;
      if (!peer && rest.rfind("cause ", 0) != 0) continue;
      r.line = std::string(rest.substr(peer ? 5 : 6));
      std::optional<Reported>& slot = peer ? out.peer : out.cause;
      if (!slot) slot = std::move(r);
    }
    return out;
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
  // One failure, one line, with its exit code: the first cause a rank
  // reported. A rank reports before it closes its connections (report_error
  // below), so its line comes before any peer's consequence of it (a
  // connection reset, an abort), even where that peer ended first. Without
  // one: a rank killed by a signal; else what a rank met communicating with
  // the others (a timeout); else why a rank ended. An interrupted job keeps
  // the launcher's exit code.
  const ErrorPipe::Reports reports = errors.read();
  const bool interrupted = r.failed_rank < 0;
  const std::optional<ErrorPipe::Reported>& line = reports.cause ? reports.cause
                                                   : r.signal != 0 && !interrupted ? std::nullopt
                                                                                   : reports.peer;
  if (!line) {
    print_error("training job failed: " + r.reason, r.exit_code);
    return r.exit_code;
  }
  std::fputs(line->line.c_str(), stderr);
  return interrupted ? r.exit_code : line->exit_code;
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
  const Config config = load_checked_config(a.config, a.overrides);  // bad input fails before any process starts
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
  if (a.resume == kResumeAuto) {
    // A launcher's restart (torchrun --max-restarts) runs the same command
    // again: it continues from the run's last checkpoint, where there is one.
    std::error_code ec;
    const std::string dir = (std::filesystem::path(out) / "checkpoints").string();
    opt.resume = std::filesystem::exists(std::filesystem::path(dir) / "latest", ec) ? dir : "";
    if (env.rank == 0)
      std::cout << (opt.resume.empty() ? "--resume auto: no checkpoint in " + dir + " yet, starting from the beginning"
                                       : "--resume auto: continuing from " + dir)
                << std::endl;
  }
  if (env.rank == 0) {
    opt.progress = train_progress(a.progress_every_s);
    opt.log = [](const std::string& line) { std::cout << line << std::endl; };
  }
  // Printed while this rank's connections are still open: the peers fail
  // only once it closes them, after its line is out.
  int reported = 0;
  opt.report_error = [&reported](const std::exception& e) { reported = report_error(e); };
  exec::TrainResult r;
  try {
    r = exec::train(config, opt);
  } catch (...) {
    if (env.launcher == "single") (void)exec::remove_cache_files(config, out);
    if (reported != 0) return reported;
    throw;
  }
  if (env.rank != 0) return 0;
  std::printf("trained %d epochs in %.1f s, final test accuracy %.2f%%\n", config.training.epochs, r.total_s,
              100 * r.final_accuracy);
  std::cout << "wrote " << out
            << "/{summary.json,epochs.csv,trace.json,grad_norms.csv,plan.json,transitions.json,iterations.csv,weights.bin,"
            << (config.model.checkpoint.empty() ? "" : "hf,") << "checkpoints}\n";
  return 0;
}

}  // namespace

Command add_train(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  return {add_train_options(app, *a), [a](int argc, char** argv) { return run_train(*a, argc, argv); }};
}

}  // namespace ep::cli
