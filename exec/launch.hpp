// Multi-process start-up, without torch: where this process sits in the job
// (read from the variables torchrun, Open MPI, MPICH/Hydra or our own
// `--nproc` launcher set), and the local launcher itself, which forks
// `nproc` copies of a program on this machine and brings the whole job down
// when one of them fails. Every bad input is an ep::Error naming the
// variable or option, what was expected and what was found.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "planner/error.hpp"

namespace ep::exec {

// A failure met communicating with other ranks (the store, a collective, a
// transfer). Where another rank failed first, it is the consequence of that
// failure, and the job's report names the cause instead (cli/train.cpp).
class PeerError : public Error {
 public:
  using Error::Error;
};

// Where this process sits in the job, from its environment.
struct ProcessEnv {
  int rank = 0, world_size = 1, local_rank = 0, local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0 = not set
  // "single", "elasticpipe" (our --nproc), "torchrun", "mpirun" (Open MPI),
  // "mpich" (PMI).
  std::string launcher = "single";
  // Set when variables of another launcher are present too (e.g. torchrun
  // inside an mpirun allocation): which were used and which ignored.
  std::string warning;
  [[nodiscard]] int node_rank() const;  // rank / local_world_size (ranks are node-major)
};

// Reads, first family found wins:
//  1. RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (torchrun; our own
//     --nproc children also carry ELASTICPIPE_LAUNCHER=elasticpipe);
//  2. OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE (Open MPI);
//  3. PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS (MPICH/Hydra).
// Any one variable of a family selects it and then all four are required;
// variables of a later family are then ignored, and `warning` says so.
// MASTER_ADDR and MASTER_PORT (rank 0's TCPStore) are required whenever
// WORLD_SIZE > 1, under MPI too (mpirun -x MASTER_ADDR -x MASTER_PORT); a
// single process reads them only if present. None present: single process.
// Checked: integers, 0 <= rank < world size, world size a multiple of the
// local size, local rank = rank % local size (node-major placement, which
// node_rank() assumes: `mpirun --map-by node` is refused), port in 1..65535.
// `getenv` lets tests use a fake environment; empty means std::getenv.
[[nodiscard]] ProcessEnv detect_process_env(
    const std::function<const char*(const char*)>& getenv = {});

// A free TCP port on 127.0.0.1 (bind to port 0, read it back, close). Free
// when asked, not reserved: another process may take it before rank 0 binds.
[[nodiscard]] int free_port();

// Rank `rank` of `world_size` processes on this machine (one node),
// meeting at 127.0.0.1:`port`: ranks as threads of one process (profile,
// validate, tests) run the same group code as a launched job.
[[nodiscard]] ProcessEnv local_env(int rank, int world_size, int port, const std::string& launcher);

struct LaunchOptions {
  int nproc = 1;
  std::string program;            // path of the executable (execv: no PATH search)
  std::vector<std::string> args;  // argv[1..] for every child
  // Extra variables for every child; the per-rank ones (RANK, WORLD_SIZE,
  // LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
  // ELASTICPIPE_LAUNCHER) are the launcher's and may not appear here.
  std::vector<std::pair<std::string, std::string>> env;
  std::chrono::milliseconds grace{3000};  // SIGTERM -> SIGKILL delay when bringing the job down
  int master_port = 0;  // rank 0's TCPStore port, 1..65535 (e.g. the caller's MASTER_PORT); 0: a free one
};

struct LaunchResult {
  // 0 when all children exited 0; else the first failure's code (128+signal
  // when killed), or 128+signal when the launcher itself was interrupted.
  int exit_code = 0;
  // The first child to fail; -1 when none did (success, or interrupted).
  int failed_rank = -1;
  // "rank 2 killed by signal 9 (Killed)" / "rank 1 exited with code 2";
  // empty on success.
  std::string reason;
  int signal = 0;  // the signal that ended failed_rank; 0 when it exited
};

// Starts nproc children (fork + execv of program), rank r with RANK=r,
// WORLD_SIZE=LOCAL_WORLD_SIZE=nproc, LOCAL_RANK=r, MASTER_ADDR=127.0.0.1,
// MASTER_PORT=<master_port, or free_port()>, ELASTICPIPE_LAUNCHER=elasticpipe, in the
// launcher's process group, stdout/stderr inherited; then waits for all.
// When one fails (non-zero exit or signal) the others get SIGTERM, then
// SIGKILL after `grace`, all are reaped, and the first failure is returned
// (of those reaped at once, a death by signal: the others may have died of
// it).
// SIGINT/SIGTERM sent to the launcher are forwarded to the children (a second
// one SIGKILLs them) and give exit_code 128+signal; the launcher's handlers
// exist only during the call. A child that cannot be started or exec'd is a
// failure like any other (exit code 127 for exec). Never hangs, never leaves
// a child behind: every child is reaped before returning, even on exceptions.
// One call at a time per process (the signal handlers are process-wide).
// Throws ep::Error on bad options (nproc < 1, program not executable,
// reserved env names) before starting anything.
[[nodiscard]] LaunchResult launch_local(const LaunchOptions& options);

}  // namespace ep::exec
