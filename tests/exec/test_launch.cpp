// The launcher: detect_process_env on fake environments (torchrun, Open MPI,
// MPICH, none, and every malformed case naming its variable), free_port,
// and launch_local on /bin/sh children: success, the per-rank environment,
// a failing rank bringing the job down (SIGTERM, then SIGKILL after the
// grace), death by signal, forwarded SIGTERM/SIGINT, and bad options.
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "exec/launch.hpp"
#include "planner/error.hpp"
#include "tests/temp_dir.hpp"

using namespace ep;
using namespace ep::exec;
using Catch::Matchers::Contains;

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using EnvMap = std::map<std::string, std::string>;

ProcessEnv detect(const EnvMap& env) {
  return detect_process_env([&env](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

using ep::test::TempDir;

// nproc copies of `sh -c script`, with $D the temp dir.
LaunchOptions sh(int nproc, const std::string& script, const TempDir& dir) {
  LaunchOptions o;
  o.nproc = nproc;
  o.program = "/bin/sh";
  o.args = {"-c", script};
  o.env = {{"D", dir.path()}};
  return o;
}

// Shell snippets. Pid files are written whole (rename) so a reader never
// sees a half-written one; `exec sleep` makes the recorded pid the sleeper.
const std::string kWritePid =
    R"(echo $$ > "$D/pid.$RANK.tmp" && mv "$D/pid.$RANK.tmp" "$D/pid.$RANK"; )";
// Waits (at most 10 s) until every rank has written its pid file.
const std::string kWaitAllPids =
    R"sh(i=0; while [ "$(ls "$D" | grep -c '^pid\.[0-9]*$')" -lt "$WORLD_SIZE" ] && [ $i -lt 200 ]; )sh"
    R"sh(do sleep 0.05; i=$((i+1)); done; )sh";

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

pid_t read_pid(const TempDir& dir, int rank) {
  const std::string path = dir.file("pid." + std::to_string(rank));
  REQUIRE(fs::exists(path));
  return static_cast<pid_t>(std::stol(slurp(path)));
}

// Reaped and gone: no such process any more.
bool gone(pid_t pid) { return ::kill(pid, 0) == -1 && errno == ESRCH; }

bool wait_for_files(const TempDir& dir, int n, std::chrono::seconds timeout) {
  const auto until = Clock::now() + timeout;
  while (Clock::now() < until) {
    bool all = true;
    for (int r = 0; r < n; ++r) all = all && fs::exists(dir.file("pid." + std::to_string(r)));
    if (all) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

// ---------------------------------------------------------------------------
// detect_process_env

TEST_CASE("detect_process_env: torchrun variables", "[launch]") {
  const ProcessEnv e = detect({{"RANK", "5"},
                               {"WORLD_SIZE", "8"},
                               {"LOCAL_RANK", "1"},
                               {"LOCAL_WORLD_SIZE", "4"},
                               {"MASTER_ADDR", "node0"},
                               {"MASTER_PORT", "29500"}});
  CHECK(e.launcher == "torchrun");
  CHECK(e.rank == 5);
  CHECK(e.world_size == 8);
  CHECK(e.local_rank == 1);
  CHECK(e.local_world_size == 4);
  CHECK(e.node_rank() == 1);
  CHECK(e.master_addr == "node0");
  CHECK(e.master_port == 29500);
}

TEST_CASE("detect_process_env: our own --nproc children", "[launch]") {
  const ProcessEnv e = detect({{"RANK", "0"},
                               {"WORLD_SIZE", "2"},
                               {"LOCAL_RANK", "0"},
                               {"LOCAL_WORLD_SIZE", "2"},
                               {"MASTER_ADDR", "127.0.0.1"},
                               {"MASTER_PORT", "40000"},
                               {"ELASTICPIPE_LAUNCHER", "elasticpipe"}});
  CHECK(e.launcher == "elasticpipe");
  CHECK(e.world_size == 2);
  CHECK(e.node_rank() == 0);
}

TEST_CASE("detect_process_env: Open MPI variables with MASTER_*", "[launch]") {
  const ProcessEnv e = detect({{"OMPI_COMM_WORLD_RANK", "3"},
                               {"OMPI_COMM_WORLD_SIZE", "4"},
                               {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                               {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                               {"MASTER_ADDR", "10.0.0.1"},
                               {"MASTER_PORT", "1234"}});
  CHECK(e.launcher == "mpirun");
  CHECK(e.rank == 3);
  CHECK(e.world_size == 4);
  CHECK(e.local_rank == 1);
  CHECK(e.local_world_size == 2);
  CHECK(e.node_rank() == 1);
  CHECK(e.master_addr == "10.0.0.1");
  CHECK(e.master_port == 1234);
}

TEST_CASE("detect_process_env: MPICH/Hydra PMI variables", "[launch]") {
  const ProcessEnv e = detect({{"PMI_RANK", "2"},
                               {"PMI_SIZE", "3"},
                               {"MPI_LOCALRANKID", "2"},
                               {"MPI_LOCALNRANKS", "3"},
                               {"MASTER_ADDR", "host-a"},
                               {"MASTER_PORT", "65535"}});
  CHECK(e.launcher == "mpich");
  CHECK(e.rank == 2);
  CHECK(e.world_size == 3);
  CHECK(e.local_rank == 2);
  CHECK(e.local_world_size == 3);
  CHECK(e.node_rank() == 0);
  CHECK(e.master_port == 65535);
}

TEST_CASE("detect_process_env: nothing set is a single process", "[launch]") {
  const ProcessEnv e = detect({{"PATH", "/bin"}});
  CHECK(e.launcher == "single");
  CHECK(e.rank == 0);
  CHECK(e.world_size == 1);
  CHECK(e.local_rank == 0);
  CHECK(e.local_world_size == 1);
  CHECK(e.node_rank() == 0);
  CHECK(e.master_addr == "127.0.0.1");
  CHECK(e.master_port == 0);
  // MASTER_* exported in a shell alone do not make a job, but are read.
  const ProcessEnv m = detect({{"MASTER_ADDR", "h"}, {"MASTER_PORT", "777"}});
  CHECK(m.launcher == "single");
  CHECK(m.master_addr == "h");
  CHECK(m.master_port == 777);
}

TEST_CASE("detect_process_env: torchrun variables win over MPI ones", "[launch]") {
  const ProcessEnv e = detect({{"RANK", "1"},
                               {"WORLD_SIZE", "2"},
                               {"LOCAL_RANK", "1"},
                               {"LOCAL_WORLD_SIZE", "2"},
                               {"MASTER_ADDR", "a"},
                               {"MASTER_PORT", "1"},
                               {"OMPI_COMM_WORLD_RANK", "0"},
                               {"PMI_RANK", "0"}});
  CHECK(e.launcher == "torchrun");
  CHECK(e.rank == 1);
  // ... and say so: the MPI variables are ignored, not silently.
  CHECK(e.warning.find("RANK (torchrun)") != std::string::npos);
  CHECK(e.warning.find("OMPI_COMM_WORLD_RANK (mpirun) is set too and ignored") != std::string::npos);
  CHECK(detect({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "1"}}).warning.empty());
}

TEST_CASE("detect_process_env: malformed environments name the variable", "[launch]") {
  const EnvMap torchrun = {{"RANK", "1"},        {"WORLD_SIZE", "4"},
                           {"LOCAL_RANK", "1"},  {"LOCAL_WORLD_SIZE", "2"},
                           {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"}};
  REQUIRE_NOTHROW(detect(torchrun));  // the base each case breaks
  auto with = [&torchrun](const EnvMap& changes, const std::vector<std::string>& removed = {}) {
    EnvMap m = torchrun;
    for (const auto& [k, v] : changes) m[k] = v;
    for (const auto& k : removed) m.erase(k);
    return m;
  };
  const EnvMap ompi = {{"OMPI_COMM_WORLD_RANK", "0"},
                       {"OMPI_COMM_WORLD_SIZE", "2"},
                       {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                       {"MASTER_ADDR", "h"},
                       {"MASTER_PORT", "29500"}};
  REQUIRE_NOTHROW(detect(ompi));

  struct Case {
    std::string what;
    EnvMap env;
    std::vector<std::string> needles;  // all in the message
  };
  const std::vector<Case> cases = {
      {"RANK without WORLD_SIZE", {{"RANK", "0"}}, {"WORLD_SIZE", "RANK is set", "unset"}},
      {"LOCAL_RANK alone", {{"LOCAL_RANK", "0"}}, {"environment variable RANK:", "unset"}},
      {"missing LOCAL_WORLD_SIZE", with({}, {"LOCAL_WORLD_SIZE"}), {"LOCAL_WORLD_SIZE", "unset"}},
      {"marker alone", {{"ELASTICPIPE_LAUNCHER", "elasticpipe"}}, {"RANK", "unset"}},
      {"unknown marker",
       with({{"ELASTICPIPE_LAUNCHER", "slurm"}}),
       {"ELASTICPIPE_LAUNCHER", "'slurm'"}},
      {"non-number rank", with({{"RANK", "abc"}}), {"RANK", "'abc'", "expected"}},
      {"rank with junk", with({{"RANK", "1x"}}), {"RANK", "'1x'"}},
      {"rank with a space", with({{"RANK", " 1"}}), {"RANK", "' 1'"}},
      {"empty rank", with({{"RANK", ""}}), {"RANK", "''"}},
      {"negative rank", with({{"RANK", "-1"}}), {"RANK", "'-1'"}},
      {"rank == world size", with({{"RANK", "4"}}), {"RANK", "[0, 4)", "'4'"}},
      {"world size 0", with({{"WORLD_SIZE", "0"}}), {"WORLD_SIZE", "'0'"}},
      {"world size overflows int",
       with({{"WORLD_SIZE", "99999999999"}}),
       {"WORLD_SIZE", "'99999999999'"}},
      {"world size not a multiple", with({{"WORLD_SIZE", "5"}}), {"WORLD_SIZE", "multiple", "'5'"}},
      {"local size > world size", with({{"LOCAL_WORLD_SIZE", "8"}}), {"LOCAL_WORLD_SIZE", "'8'"}},
      {"local rank >= local size", with({{"LOCAL_RANK", "2"}}), {"LOCAL_RANK", "'2'"}},
      {"round-robin placement", with({{"LOCAL_RANK", "0"}}), {"LOCAL_RANK", "node-major", "'0'"}},
      {"port out of range",
       with({{"MASTER_PORT", "70000"}}),
       {"MASTER_PORT", "1..65535", "'70000'"}},
      {"port 0", with({{"MASTER_PORT", "0"}}), {"MASTER_PORT", "'0'"}},
      {"port not a number", with({{"MASTER_PORT", "http"}}), {"MASTER_PORT", "'http'"}},
      {"no MASTER_PORT", with({}, {"MASTER_PORT"}), {"MASTER_PORT", "unset"}},
      {"no MASTER_ADDR", with({}, {"MASTER_ADDR"}), {"MASTER_ADDR", "unset"}},
      {"empty MASTER_ADDR", with({{"MASTER_ADDR", ""}}), {"MASTER_ADDR", "''"}},
      {"single process, bad port", {{"MASTER_PORT", "x"}}, {"MASTER_PORT", "'x'"}},
      {"Open MPI partial", {{"OMPI_COMM_WORLD_RANK", "0"}}, {"OMPI_COMM_WORLD_SIZE", "unset"}},
      {"Open MPI without MASTER_ADDR",
       [&ompi] {
         EnvMap m = ompi;
         m.erase("MASTER_ADDR");
         return m;
       }(),
       {"MASTER_ADDR", "mpirun -x MASTER_ADDR"}},
      {"Open MPI rank too big",
       [&ompi] {
         EnvMap m = ompi;
         m["OMPI_COMM_WORLD_RANK"] = "7";
         return m;
       }(),
       {"OMPI_COMM_WORLD_RANK", "'7'"}},
      {"PMI without local ids",
       {{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}},
       {"MPI_LOCALRANKID", "PMI_RANK is set", "unset"}},
      {"PMI bad local size",
       {{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "two"}},
       {"MPI_LOCALNRANKS", "'two'"}},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    try {
      (void)detect(c.env);
      FAIL("no exception");
    } catch (const Error& e) {
      const std::string msg = e.what();
      INFO(msg);
      for (const std::string& needle : c.needles) CHECK_THAT(msg, Contains(needle));
      CHECK_THAT(msg,
                 Contains("environment variable") && Contains("expected") && Contains("found"));
    }
  }
}

// ---------------------------------------------------------------------------
// free_port

TEST_CASE("free_port returns a port that can be bound", "[launch]") {
  for (int i = 0; i < 3; ++i) {
    const int port = free_port();
    REQUIRE(port >= 1);
    REQUIRE(port <= 65535);
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    const int rc = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::close(fd);
    CHECK(rc == 0);
  }
}

// ---------------------------------------------------------------------------
// launch_local

TEST_CASE("launch_local: all children exit 0", "[launch]") {
  TempDir dir;
  const LaunchResult r = launch_local(sh(3, "exit 0", dir));
  CHECK(r.exit_code == 0);
  CHECK(r.failed_rank == -1);
  CHECK(r.reason.empty());
}

TEST_CASE("launch_local: every rank gets its environment, one port for all", "[launch]") {
  TempDir dir;
  // Values the launcher must replace, not append to (execve with two RANK=
  // entries would hand the child whichever getenv finds first).
  ::setenv("RANK", "99", 1);
  ::setenv("MASTER_PORT", "1", 1);
  LaunchOptions o =
      sh(4,
         R"(echo "$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_PORT" > "$D/out.$RANK"; )"
         // The environment exactly as execve got it, not as sh re-exports it.
         R"(tr '\0' '\n' < /proc/$$/environ > "$D/env.$RANK")",
         dir);
  o.env.emplace_back("EP_EXTRA", "x y");
  const LaunchResult r = launch_local(o);
  ::unsetenv("RANK");
  ::unsetenv("MASTER_PORT");
  REQUIRE(r.exit_code == 0);

  int port = -1;
  for (int rank = 0; rank < 4; ++rank) {
    INFO("rank " << rank);
    std::istringstream out(slurp(dir.file("out." + std::to_string(rank))));
    int got_rank = -1, world = -1, local = -1, local_world = -1, got_port = -1;
    out >> got_rank >> world >> local >> local_world >> got_port;
    CHECK(got_rank == rank);
    CHECK(world == 4);
    CHECK(local == rank);
    CHECK(local_world == 4);
    CHECK(got_port >= 1);
    CHECK(got_port <= 65535);
    if (port < 0) port = got_port;
    CHECK(got_port == port);

    // What the child saw, read back by detect_process_env as a child would.
    EnvMap env;
    std::map<std::string, int> count;
    std::istringstream lines(slurp(dir.file("env." + std::to_string(rank))));
    for (std::string line; std::getline(lines, line);) {
      const auto eq = line.find('=');
      if (eq == std::string::npos) continue;
      env.emplace(line.substr(0, eq), line.substr(eq + 1));
      ++count[line.substr(0, eq)];
    }
    CHECK(count["RANK"] == 1);
    CHECK(count["MASTER_PORT"] == 1);
    CHECK(env["EP_EXTRA"] == "x y");
    CHECK(env.count("PATH") == 1);  // inherited
    const ProcessEnv e = detect(env);
    CHECK(e.launcher == "elasticpipe");
    CHECK(e.rank == rank);
    CHECK(e.world_size == 4);
    CHECK(e.node_rank() == 0);
    CHECK(e.master_addr == "127.0.0.1");
    CHECK(e.master_port == port);
  }
}

TEST_CASE("launch_local: a given master_port reaches every rank", "[launch]") {
  TempDir dir;
  LaunchOptions o = sh(2, R"(echo "$MASTER_PORT" > "$D/port.$RANK")", dir);
  o.master_port = 29517;
  REQUIRE(launch_local(o).exit_code == 0);
  for (const char* rank : {"0", "1"}) CHECK(slurp(dir.file(std::string("port.") + rank)) == "29517\n");
  o.master_port = 70000;
  CHECK_THROWS_WITH(launch_local(o), Contains("master_port") && Contains("70000"));
}

TEST_CASE("launch_local: a failing rank brings the others down", "[launch]") {
  TempDir dir;
  const auto t0 = Clock::now();
  const LaunchResult r = launch_local(
      sh(4, kWritePid + R"(if [ "$RANK" = 1 ]; then )" + kWaitAllPids + "exit 3; fi; exec sleep 30",
         dir));
  const double elapsed = seconds_since(t0);
  CHECK(elapsed < 10.0);
  CHECK(r.exit_code == 3);
  CHECK(r.failed_rank == 1);
  CHECK(r.reason == "rank 1 exited with code 3");
  for (int rank : {0, 2, 3}) {
    INFO("rank " << rank);
    CHECK(gone(read_pid(dir, rank)));
  }
}

TEST_CASE("launch_local: a rank ignoring SIGTERM is SIGKILLed after the grace", "[launch]") {
  TempDir dir;
  // Rank 0 ignores SIGTERM (inherited by the exec'd sleep); rank 1 fails
  // once rank 0's pid is recorded.
  LaunchOptions o = sh(
      2,
      R"(if [ "$RANK" = 0 ]; then trap '' TERM; )" + kWritePid +
          R"(exec sleep 30; fi; )"
          R"(i=0; while [ ! -e "$D/pid.0" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; )"
          R"(exit 5)",
      dir);
  o.grace = std::chrono::milliseconds(200);
  const auto t0 = Clock::now();
  const LaunchResult r = launch_local(o);
  const double elapsed = seconds_since(t0);
  CHECK(elapsed < 10.0);
  CHECK(elapsed >= 0.2);  // the grace was given
  CHECK(r.exit_code == 5);
  CHECK(r.failed_rank == 1);
  CHECK(gone(read_pid(dir, 0)));
}

TEST_CASE("launch_local: a rank killed by a signal", "[launch]") {
  TempDir dir;
  const auto t0 = Clock::now();
  const LaunchResult r = launch_local(sh(
      2,
      kWritePid + R"(if [ "$RANK" = 1 ]; then )" + kWaitAllPids + "kill -9 $$; fi; exec sleep 30",
      dir));
  CHECK(seconds_since(t0) < 10.0);
  CHECK(r.exit_code == 137);
  CHECK(r.failed_rank == 1);
  CHECK_THAT(r.reason, Contains("rank 1") && Contains("signal 9"));
  CHECK(gone(read_pid(dir, 0)));
  CHECK(gone(read_pid(dir, 1)));
}

TEST_CASE("launch_local: SIGTERM to the launcher is forwarded, handlers restored", "[launch]") {
  TempDir dir;
  struct sigaction before {
  }, after{};
  ::sigaction(SIGTERM, nullptr, &before);
  // Sent once every child runs, hence once the launcher's handler is in
  // place: without forwarding, the test process itself would die.
  std::thread sender([&dir] {
    if (wait_for_files(dir, 2, std::chrono::seconds(10))) ::kill(::getpid(), SIGTERM);
  });
  const auto t0 = Clock::now();
  const LaunchResult r = launch_local(sh(2, kWritePid + "exec sleep 30", dir));
  const double elapsed = seconds_since(t0);
  sender.join();
  ::sigaction(SIGTERM, nullptr, &after);
  CHECK(elapsed < 10.0);
  CHECK(r.exit_code == 128 + SIGTERM);
  CHECK(r.failed_rank == -1);
  CHECK_THAT(r.reason, Contains("signal 15"));
  CHECK(gone(read_pid(dir, 0)));
  CHECK(gone(read_pid(dir, 1)));
  CHECK(after.sa_handler == before.sa_handler);
}

TEST_CASE("launch_local: an interrupted job fails even if its ranks exit 0", "[launch]") {
  TempDir dir;
  std::thread sender([&dir] {
    if (wait_for_files(dir, 2, std::chrono::seconds(10))) ::kill(::getpid(), SIGINT);
  });
  // The rank shuts down cleanly on SIGINT (exit 0), like a trainer saving
  // its state; the background sleep is killed so it outlives nothing.
  const LaunchResult r = launch_local(sh(
      2,
      R"(trap 'kill $!; exit 0' INT; sleep 30 </dev/null >/dev/null 2>&1 & )" + kWritePid + "wait",
      dir));
  sender.join();
  CHECK(r.exit_code == 128 + SIGINT);
  CHECK(r.failed_rank == -1);
  CHECK_THAT(r.reason, Contains("signal 2"));
}

TEST_CASE("launch_local: ranks die with a launcher killed by SIGKILL", "[launch]") {
  TempDir dir;
  // Orphaned ranks come to us (subreaper), so that we can reap them and see
  // what killed them; and no zombie is left to an init that may not reap.
  REQUIRE(::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
  // The launcher in a forked copy of this process, so that it can be killed.
  const pid_t launcher = ::fork();
  REQUIRE(launcher >= 0);
  if (launcher == 0) {
    try {
      const LaunchResult r = launch_local(sh(2, kWritePid + "exec sleep 30", dir));
      ::_exit(r.exit_code);
    } catch (...) {
      ::_exit(99);  // never back into Catch in the copy
    }
  }
  const bool started = wait_for_files(dir, 2, std::chrono::seconds(10));
  ::kill(launcher, SIGKILL);
  ::waitpid(launcher, nullptr, 0);
  if (started) {
    for (int rank = 0; rank < 2; ++rank) {
      INFO("rank " << rank);
      const pid_t pid = read_pid(dir, rank);
      // PR_SET_PDEATHSIG: SIGKILL, at once rather than after the 30 s sleep.
      int status = 0;
      pid_t r = 0;
      const auto until = Clock::now() + std::chrono::seconds(5);
      while ((r = ::waitpid(pid, &status, WNOHANG)) == 0 && Clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (r == 0) {  // still running: fail, and leave nothing behind
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
      }
      CHECK(r == pid);
      CHECK(WIFSIGNALED(status));
      CHECK(WTERMSIG(status) == SIGKILL);
    }
  }
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
  REQUIRE(started);
}

TEST_CASE("launch_local: a program that cannot be executed", "[launch]") {
  TempDir dir;
  LaunchOptions o;
  o.nproc = 2;
  o.program = dir.path();  // a directory: passes access(X_OK), execve fails
  const LaunchResult r = launch_local(o);
  CHECK(r.exit_code == 127);
  CHECK(r.failed_rank == 0);
  CHECK_THAT(r.reason, Contains("could not execute") && Contains(o.program));
}

TEST_CASE("launch_local: bad options are refused before starting", "[launch]") {
  TempDir dir;
  LaunchOptions o = sh(0, "exit 0", dir);
  CHECK_THROWS_WITH(launch_local(o), Contains("nproc"));
  o = sh(1, "exit 0", dir);
  o.program = dir.file("missing");
  CHECK_THROWS_WITH(launch_local(o), Contains(o.program));
  o = sh(1, "exit 0", dir);
  o.env.emplace_back("RANK", "3");
  CHECK_THROWS_WITH(launch_local(o), Contains("RANK"));
  o = sh(1, "exit 0", dir);
  o.env.emplace_back("A=B", "3");
  CHECK_THROWS_WITH(launch_local(o), Contains("'A=B'"));
}
