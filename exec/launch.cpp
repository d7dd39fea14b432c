// The launcher and the environment it (or torchrun, or MPI) leaves behind.
// POSIX only, Linux for PR_SET_PDEATHSIG. See launch.hpp for the contract.
#include "exec/launch.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <climits>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <optional>
#include <set>

#include "planner/error.hpp"

extern char** environ;  // NOLINT: POSIX, not declared by any header in C++

namespace ep::exec {

int ProcessEnv::node_rank() const { return local_world_size > 0 ? rank / local_world_size : 0; }

// ---------------------------------------------------------------------------
// detect_process_env

namespace {

// One launcher's four variables, in the order they are reported when missing.
struct Family {
  const char* launcher;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
  const char* export_hint;  // how to pass MASTER_* through this launcher
};

constexpr Family kTorchrun{"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", ""};
constexpr Family kFamilies[] = {
    kTorchrun,
    {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE", "; pass it with mpirun -x MASTER_ADDR -x MASTER_PORT"},
    {"mpich", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
     "; pass it with mpiexec -genv MASTER_ADDR <host> -genv MASTER_PORT <port>"},
};

constexpr const char* kLauncherVar = "ELASTICPIPE_LAUNCHER";

Error env_error(const std::string& name, const std::string& expected, const std::string& found) {
  return Error("environment variable " + name + ": expected " + expected + ", found " + found);
}

std::string quoted(const std::string& s) { return "'" + s + "'"; }

class EnvReader {
 public:
  explicit EnvReader(const std::function<const char*(const char*)>& getenv) : getenv_(getenv) {}

  [[nodiscard]] std::optional<std::string> get(const char* name) const {
    const char* v = getenv_ ? getenv_(name) : std::getenv(name);
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  }

  // A decimal integer in [lo, hi], the whole value (no sign, spaces or
  // suffix), else an error with `expected`. The variable must be present.
  [[nodiscard]] int get_int(const char* name, long long lo, long long hi,
                            const std::string& expected) const {
    const std::string v = get(name).value_or("");
    long long x = 0;
    const char* end = v.data() + v.size();
    auto [ptr, ec] = std::from_chars(v.data(), end, x);
    if (v.empty() || ec != std::errc() || ptr != end || x < lo || x > hi)
      throw env_error(name, expected, quoted(v));
    return static_cast<int>(x);
  }

 private:
  const std::function<const char*(const char*)>& getenv_;
};

std::string join_names(const Family& f) {
  return std::string(f.rank) + ", " + f.size + ", " + f.local_rank + " and " + f.local_size;
}

void read_master(const EnvReader& env, const Family* family, ProcessEnv& out) {
  const auto addr = env.get("MASTER_ADDR");
  const auto port = env.get("MASTER_PORT");
  // Rank 0's TCPStore is the rendezvous of every multi-process run, so a job
  // without its address cannot start: say so here rather than in a connect().
  if (out.world_size > 1) {
    const std::string why = std::string(" (rank 0's TCPStore, required since ") + family->size +
                            "=" + std::to_string(out.world_size) + family->export_hint + ")";
    if (!addr) throw env_error("MASTER_ADDR", "a host name or address" + why, "nothing (unset)");
    if (!port) throw env_error("MASTER_PORT", "a TCP port in 1..65535" + why, "nothing (unset)");
  }
  if (addr) {
    if (addr->empty()) throw env_error("MASTER_ADDR", "a host name or address", "''");
    out.master_addr = *addr;
  }
  if (port) out.master_port = env.get_int("MASTER_PORT", 1, 65535, "a TCP port in 1..65535");
}

}  // namespace

ProcessEnv detect_process_env(const std::function<const char*(const char*)>& getenv) {
  const EnvReader env(getenv);
  ProcessEnv out;

  // The first family with any variable set is the one in charge; the
  // launcher marker counts for torchrun's family (our children use it).
  const Family* family = nullptr;
  const char* trigger = nullptr;
  const auto marker = env.get(kLauncherVar);
  if (marker) {
    if (*marker != "elasticpipe")
      throw env_error(kLauncherVar, "'elasticpipe' or unset", quoted(*marker));
    family = &kFamilies[0];
    trigger = kLauncherVar;
  }
  for (const Family& f : kFamilies) {
    if (family != nullptr) break;
    for (const char* name : {f.rank, f.size, f.local_rank, f.local_size})
      if (env.get(name)) {
        family = &f;
        trigger = name;
        break;
      }
  }
  if (family == nullptr) {
    out.launcher = "single";
    read_master(env, &kTorchrun, out);
    return out;
  }
  const Family& f = *family;
  out.launcher = marker ? "elasticpipe" : f.launcher;
  for (const Family& other : kFamilies) {
    if (&other == family) continue;
    for (const char* name : {other.rank, other.size, other.local_rank, other.local_size})
      if (env.get(name)) {
        out.warning = std::string("the job's place is read from ") + trigger + " (" + out.launcher + "); " + name +
                      " (" + other.launcher + ") is set too and ignored";
        break;
      }
    if (!out.warning.empty()) break;
  }

  // Partial sets are refused rather than guessed: a missing local size
  // would silently put every rank on node 0.
  for (const char* name : {f.rank, f.size, f.local_rank, f.local_size})
    if (!env.get(name))
      throw env_error(name,
                      std::string("a value since ") + trigger + " is set (" + out.launcher +
                          " sets all of " + join_names(f) + ")",
                      "nothing (unset)");

  const std::string ws_name = f.size;
  out.world_size = env.get_int(f.size, 1, INT_MAX, "an integer >= 1");
  const std::string ws = ws_name + "=" + std::to_string(out.world_size);
  out.local_world_size =
      env.get_int(f.local_size, 1, out.world_size, "an integer in [1, " + ws + "]");
  if (out.world_size % out.local_world_size != 0)
    throw env_error(f.size,
                    std::string("a multiple of ") + f.local_size + "=" +
                        std::to_string(out.local_world_size) + " (every node runs as many ranks)",
                    quoted(std::to_string(out.world_size)));
  out.rank = env.get_int(f.rank, 0, out.world_size - 1,
                         "an integer in [0, " + std::to_string(out.world_size) + ") (" + ws + ")");
  out.local_rank = env.get_int(f.local_rank, 0, out.local_world_size - 1,
                               "an integer in [0, " + std::to_string(out.local_world_size) + ") (" +
                                   f.local_size + "=" + std::to_string(out.local_world_size) + ")");
  // node_rank() = rank / local size holds only for node-major placement;
  // round-robin placement (mpirun --map-by node) would give wrong nodes, so
  // it is refused here instead of mis-assigning the node-shared cache.
  const int want_local = out.rank % out.local_world_size;
  if (out.local_rank != want_local)
    throw env_error(f.local_rank,
                    std::to_string(want_local) + " = " + f.rank + " % " + f.local_size +
                        " (ranks placed node-major, e.g. not mpirun --map-by node)",
                    quoted(std::to_string(out.local_rank)));
  read_master(env, &f, out);
  return out;
}

// ---------------------------------------------------------------------------
// free_port

namespace {

struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

Error sys_error(const std::string& what) { return Error(what + ": " + std::strerror(errno)); }

}  // namespace

ProcessEnv local_env(int rank, int world_size, int port, const std::string& launcher) {
  ProcessEnv e;
  e.rank = e.local_rank = rank;
  e.world_size = e.local_world_size = world_size;
  e.master_port = port;
  e.launcher = launcher;
  return e;
}

int free_port() {
  Fd sock(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (sock.fd < 0) throw sys_error("free_port: socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;  // the kernel picks a free one
  if (::bind(sock.fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    throw sys_error("free_port: bind 127.0.0.1:0");
  socklen_t len = sizeof addr;
  if (::getsockname(sock.fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    throw sys_error("free_port: getsockname");
  return ntohs(addr.sin_port);
}

// ---------------------------------------------------------------------------
// launch_local

namespace {

using Clock = std::chrono::steady_clock;

// Signal handlers can only reach globals. The handler writes a byte to a
// self-pipe so that the wait loop's poll() wakes at once on SIGCHLD, SIGINT
// or SIGTERM, whichever thread the kernel delivered the signal to.
std::atomic<bool> g_launch_active{false};
std::atomic<int> g_wake_fd{-1};
std::atomic<int> g_signal_count{0};  // SIGINT/SIGTERM received so far
std::atomic<int> g_last_signal{0};
std::atomic<bool> g_last_from_terminal{false};
static_assert(std::atomic<int>::is_always_lock_free, "used from a signal handler");

extern "C" void launch_on_signal(int sig, siginfo_t* info, void* /*context*/) {
  const int saved_errno = errno;
  if (sig == SIGINT || sig == SIGTERM) {
    // SI_KERNEL: sent by the terminal (Ctrl-C) to the whole foreground
    // process group, children included; kill(2) gives SI_USER.
    g_last_from_terminal.store(info != nullptr && info->si_code == SI_KERNEL);
    g_last_signal.store(sig);
    g_signal_count.fetch_add(1);
  }
  const int fd = g_wake_fd.load();
  if (fd >= 0) {
    const char byte = 0;
    [[maybe_unused]] const ssize_t n = ::write(fd, &byte, 1);  // full pipe: already awake
  }
  errno = saved_errno;
}

constexpr int kHandled[] = {SIGINT, SIGTERM, SIGCHLD};

// The launcher's signal handlers and self-pipe for the duration of one
// launch_local; the previous handlers come back on destruction.
class SignalScope {
 public:
  SignalScope() {
    if (g_launch_active.exchange(true))
      throw Error("launch_local: another launch is already running in this process");
    if (::pipe2(pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
      g_launch_active = false;
      throw sys_error("launch_local: pipe2");
    }
    g_wake_fd = pipe_[1];
    g_signal_count = 0;
    g_last_signal = 0;
    struct sigaction sa {};
    sa.sa_sigaction = launch_on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_NOCLDSTOP;  // stopped children are not failures
    for (std::size_t i = 0; i < std::size(kHandled); ++i) {
      ::sigaction(kHandled[i], nullptr, &old_[i]);
      // An ignored SIGINT/SIGTERM (nohup, `cmd &` in a script) stays ignored,
      // as a shell would do; the children inherit that too.
      if (kHandled[i] != SIGCHLD && old_[i].sa_handler == SIG_IGN) continue;
      ::sigaction(kHandled[i], &sa, nullptr);
    }
  }
  ~SignalScope() {
    for (std::size_t i = 0; i < std::size(kHandled); ++i)
      ::sigaction(kHandled[i], &old_[i], nullptr);
    g_wake_fd = -1;
    ::close(pipe_[0]);
    ::close(pipe_[1]);
    g_launch_active = false;
  }
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;

  // In a forked child before exec, async-signal-safe: what exec will give,
  // now. The launcher's ignored signals stay ignored, every handler becomes
  // SIG_DFL: a signal between fork and exec (our own SIGTERM after a failed
  // exec, a Ctrl-C) must kill the child, not run the parent's handler in a
  // copy of the parent (a test runner would go on running tests there).
  void reset_in_child() const {
    for (std::size_t i = 0; i < std::size(kHandled); ++i)
      ::sigaction(kHandled[i], &old_[i], nullptr);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    for (int sig = 1; sig < NSIG; ++sig) {
      struct sigaction cur {};
      if (::sigaction(sig, nullptr, &cur) != 0) continue;  // glibc's reserved 32, 33
      const bool is_handler = (cur.sa_flags & SA_SIGINFO) != 0 ||
                              (cur.sa_handler != SIG_DFL && cur.sa_handler != SIG_IGN);
      if (is_handler) ::sigaction(sig, &dfl, nullptr);
    }
  }

  // Waits until a signal arrives or `timeout_ms` passes, then empties the pipe.
  void wait(int timeout_ms) const {
    pollfd p{pipe_[0], POLLIN, 0};
    ::poll(&p, 1, timeout_ms);  // EINTR is a wake-up like any other
    char buf[64];
    while (::read(pipe_[0], buf, sizeof buf) > 0) {
    }
  }

 private:
  int pipe_[2] = {-1, -1};
  struct sigaction old_[std::size(kHandled)]{};
};

const std::set<std::string>& reserved_names() {
  static const std::set<std::string> names = {
      "RANK",        "WORLD_SIZE",  "LOCAL_RANK", "LOCAL_WORLD_SIZE",
      "MASTER_ADDR", "MASTER_PORT", kLauncherVar};
  return names;
}

// argv and envp for one child, built before fork: between fork and exec only
// async-signal-safe calls are allowed (the parent may have other threads, so
// the child must not allocate).
struct ChildSpec {
  std::vector<std::string> strings;  // argv strings, then env strings
  std::vector<char*> argv, envp;
  ChildSpec(const LaunchOptions& o, const std::vector<std::string>& base_env, int rank, int port) {
    strings.push_back(o.program);
    strings.insert(strings.end(), o.args.begin(), o.args.end());
    const std::size_t nargs = strings.size();
    strings.insert(strings.end(), base_env.begin(), base_env.end());
    const std::string n = std::to_string(o.nproc), r = std::to_string(rank);
    for (const std::string& s :
         {"RANK=" + r, "WORLD_SIZE=" + n, "LOCAL_RANK=" + r, "LOCAL_WORLD_SIZE=" + n,
          std::string("MASTER_ADDR=127.0.0.1"), "MASTER_PORT=" + std::to_string(port),
          std::string(kLauncherVar) + "=elasticpipe"})
      strings.push_back(s);
    for (const auto& [k, v] : o.env) strings.push_back(k + "=" + v);
    for (std::size_t i = 0; i < strings.size(); ++i)
      (i < nargs ? argv : envp).push_back(strings[i].data());
    argv.push_back(nullptr);
    envp.push_back(nullptr);
  }
};

std::string describe_status(int rank, int status, int& exit_code) {
  const std::string who = "rank " + std::to_string(rank);
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    exit_code = 128 + sig;
    const char* name = ::strsignal(sig);
    return who + " killed by signal " + std::to_string(sig) + " (" + (name ? name : "?") + ")" +
           (WCOREDUMP(status) ? ", core dumped" : "");
  }
  exit_code = WEXITSTATUS(status);
  return who + " exited with code " + std::to_string(exit_code);
}

// The running job: children, the first failure, and the teardown state.
class Job {
 public:
  explicit Job(std::chrono::milliseconds grace)
      : grace_(std::max(grace, std::chrono::milliseconds(0))) {}

  // On an exception after some children started: kill and reap them all, so
  // that nothing outlives the call.
  ~Job() {
    for (Child& c : children_)
      if (c.running) ::kill(c.pid, SIGKILL);
    for (Child& c : children_)
      if (c.running)
        while (::waitpid(c.pid, nullptr, 0) < 0 && errno == EINTR) {
        }
  }
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  void add(pid_t pid) { children_.push_back({pid, true}); }
  [[nodiscard]] bool stopping() const { return failed_ || interrupted_ != 0; }

  void fail(int rank, int exit_code, std::string reason, int signal = 0) {
    if (stopping()) return;  // later exits are consequences of the teardown
    failed_ = true;
    result_ = {exit_code, rank, std::move(reason), signal};
    begin_teardown(SIGTERM);
  }

  // Runs until every child is reaped; `scope` delivers the wake-ups.
  LaunchResult wait_all(const SignalScope& scope) {
    while (true) {
      handle_signals();
      reap();
      if (std::none_of(children_.begin(), children_.end(),
                       [](const Child& c) { return c.running; }))
        break;
      const auto now = Clock::now();
      if (kill_at_ && now >= *kill_at_) kill_now();
      // 100 ms also bounds the cost of a wake-up lost to a signal mask set by
      // a thread outside our control.
      auto timeout = std::chrono::milliseconds(100);
      if (kill_at_)
        timeout = std::min(timeout, std::chrono::ceil<std::chrono::milliseconds>(*kill_at_ - now));
      scope.wait(static_cast<int>(std::max<std::int64_t>(timeout.count(), 0)));
    }
    if (!failed_ && interrupted_ != 0) {
      const char* name = ::strsignal(interrupted_);
      result_ = {128 + interrupted_, -1,
                 "launcher interrupted by signal " + std::to_string(interrupted_) + " (" +
                     (name ? name : "?") + "), forwarded to the ranks"};
    }
    return result_;
  }

  // Signals seen by the handler and not handled yet.
  void handle_signals() {
    for (const int n = g_signal_count.load(); seen_signals_ < n; ++seen_signals_) {
      if (stopping()) {
        kill_now();  // a second Ctrl-C, or one during a teardown: no more waiting
      } else {
        interrupted_ = g_last_signal.load();
        // Forwarded as received (SIGINT stays SIGINT), except to children
        // that got it from the terminal already: a trainer may take a
        // second Ctrl-C as "stop now, skip the checkpoint".
        const bool from_terminal = g_last_from_terminal.load();
        for (const Child& c : children_)
          if (c.running && !(from_terminal && ::getpgid(c.pid) == ::getpgrp()))
            ::kill(c.pid, interrupted_);
        kill_at_ = Clock::now() + grace_;
      }
    }
  }

 private:
  struct Child {
    pid_t pid;
    bool running;
  };

  void signal_running(int sig) {
    // Only unreaped pids are signalled: a zombie keeps its pid, so there is
    // no risk of hitting a recycled one.
    for (const Child& c : children_)
      if (c.running) ::kill(c.pid, sig);
  }
  void begin_teardown(int sig) {
    signal_running(sig);
    kill_at_ = Clock::now() + grace_;
  }
  void kill_now() {
    signal_running(SIGKILL);
    kill_at_.reset();
  }

  // Reaps what has exited. Failures reaped together are ordered by kind: a
  // rank killed by a signal had no say, while the ranks that exited with an
  // error may have met its closed connections, so it is the first failure.
  void reap() {
    struct Failure {
      int rank, code, signal;
      std::string reason;
    };
    std::vector<Failure> failures;
    for (std::size_t rank = 0; rank < children_.size(); ++rank) {
      Child& c = children_[rank];
      if (!c.running) continue;
      int status = 0;
      pid_t r;
      do r = ::waitpid(c.pid, &status, WNOHANG);
      while (r < 0 && errno == EINTR);
      if (r == 0) continue;
      c.running = false;
      const int n = static_cast<int>(rank);
      if (r < 0) {  // ECHILD: reaped by someone else's waitpid(-1); its status is lost
        failures.push_back({n, 1, 0, "rank " + std::to_string(rank) + " was reaped outside the launcher (status lost)"});
        continue;
      }
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
      int code = 0;
      std::string reason = describe_status(n, status, code);
      failures.push_back({n, code, WIFSIGNALED(status) ? WTERMSIG(status) : 0, std::move(reason)});
    }
    if (failures.empty()) return;
    const auto first = std::find_if(failures.begin(), failures.end(), [](const Failure& f) { return f.signal != 0; });
    Failure& f = first != failures.end() ? *first : failures.front();
    fail(f.rank, f.code, std::move(f.reason), f.signal);
  }

  std::chrono::milliseconds grace_;
  std::vector<Child> children_;
  LaunchResult result_;
  bool failed_ = false;
  int interrupted_ = 0;  // the signal the launcher received, 0 if none
  int seen_signals_ = 0;
  std::optional<Clock::time_point> kill_at_;
};

}  // namespace

LaunchResult launch_local(const LaunchOptions& o) {
  // Bad options are refused before anything starts.
  if (o.nproc < 1)
    throw Error("launch: nproc: expected an integer >= 1, found " + std::to_string(o.nproc));
  if (o.program.empty()) throw Error("launch: program: expected an executable's path, found ''");
  if (::access(o.program.c_str(), X_OK) != 0)
    throw Error("launch: program '" + o.program + "': expected an executable file, found " +
                std::strerror(errno));
  for (const auto& [k, v] : o.env) {
    if (k.empty() || k.find('=') != std::string::npos || k.find('\0') != std::string::npos)
      throw Error("launch: env: expected a variable name without '=', found " + quoted(k));
    if (reserved_names().count(k) != 0)
      throw Error("launch: env: " + k +
                  " is set per rank by the launcher and cannot be overridden");
  }

  // The inherited environment, minus what the launcher sets per rank.
  std::set<std::string> overridden = reserved_names();
  for (const auto& kv : o.env) overridden.insert(kv.first);
  std::vector<std::string> base_env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry = *e;
    if (overridden.count(entry.substr(0, entry.find('='))) == 0) base_env.push_back(entry);
  }
  if (o.master_port < 0 || o.master_port > 65535)
    throw Error("launch: master_port: expected a TCP port in 1..65535 (0: a free one), found " +
                std::to_string(o.master_port));
  const int port = o.master_port > 0 ? o.master_port : free_port();
  std::deque<ChildSpec> specs;  // a deque never moves its elements: argv/envp point into them
  for (int r = 0; r < o.nproc; ++r) specs.emplace_back(o, base_env, r, port);

  // Our buffered output first, and not duplicated into the children.
  std::fflush(nullptr);

  const SignalScope scope;  // before the first fork: a Ctrl-C from now on is forwarded
  Job job(o.grace);         // after `scope`: destroyed (children reaped) before handlers go
  const pid_t launcher_pid = ::getpid();

  for (int r = 0; r < o.nproc && !job.stopping(); ++r) {
    job.handle_signals();  // a Ctrl-C during start-up stops starting more
    if (job.stopping()) break;
    const ChildSpec& spec = specs[static_cast<std::size_t>(r)];
    // The child reports an exec failure's errno through this pipe; it closes
    // on a successful exec (O_CLOEXEC), so EOF means "running the program".
    int status_pipe[2];
    if (::pipe2(status_pipe, O_CLOEXEC) != 0) {
      job.fail(r, 1,
               "could not start rank " + std::to_string(r) + ": pipe2: " + std::strerror(errno));
      break;
    }
    // Signals blocked across fork so that our handler never runs in the child
    // (it would write to the launcher's self-pipe); the child restores them.
    sigset_t all, previous;
    sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &previous);
    const pid_t pid = ::fork();
    if (pid == 0) {
      // Child: async-signal-safe calls only, up to exec.
      // PR_SET_PDEATHSIG: SIGKILL us if the launcher dies, even by kill -9,
      // so that no rank is left running (and holding GPUs or the port)
      // without its launcher. It fires when the forking *thread* exits; the
      // thread in launch_local lives until every child is reaped.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != launcher_pid) ::_exit(1);  // the launcher died before prctl
      ::close(status_pipe[0]);
      scope.reset_in_child();
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::execve(spec.argv[0], spec.argv.data(), spec.envp.data());
      const int err = errno;
      [[maybe_unused]] const ssize_t n = ::write(status_pipe[1], &err, sizeof err);
      ::_exit(127);
    }
    const int fork_errno = errno;
    ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    ::close(status_pipe[1]);
    if (pid < 0) {
      ::close(status_pipe[0]);
      job.fail(
          r, 1,
          "could not start rank " + std::to_string(r) + ": fork: " + std::strerror(fork_errno));
      break;
    }
    job.add(pid);
    int exec_errno = 0;
    ssize_t n;
    do n = ::read(status_pipe[0], &exec_errno, sizeof exec_errno);
    while (n < 0 && errno == EINTR);
    ::close(status_pipe[0]);
    if (n == static_cast<ssize_t>(sizeof exec_errno))
      job.fail(r, 127,
               "rank " + std::to_string(r) + " could not execute '" + o.program +
                   "': " + std::strerror(exec_errno));
  }
  return job.wait_all(scope);
}

}  // namespace ep::exec
