#pragma once
// run_local_ranks — starts W processes of one program on this machine (the multi-process
// tests and comm_bench use it) and reaps them, within a deadline.
//
// Each child runs `program args...` with RF_RANK, RF_WORLD and RF_STORE (a fresh
// FileStore directory) in its environment, in a process group of its own, with
// PR_SET_PDEATHSIG so it dies with the launcher, and with alarm(deadline) as a second
// guard. The launcher waits on SIGCHLD (not sleeps) until all exited or the deadline
// passed; then it SIGKILLs the whole group and reaps every child by PID. Nothing is left
// running, whatever happens.
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include <sys/types.h>

namespace rf::comm {

struct RankExit {
  int rank = -1;
  pid_t pid = -1;
  int status = 0;          // as from waitpid
  bool killed_at_deadline = false;
  bool ok() const;         // exited with status 0
  std::string describe() const;  // "rank 2 (pid 123): exit 1" / "killed by signal 9"
};

struct LocalLaunch {
  std::string program;
  std::vector<std::string> args;
  int world = 1;
  std::chrono::milliseconds deadline{60000};
  std::vector<std::pair<std::string, std::string>> env;  // extra variables for every rank
  std::string store_dir;  // "" = a new directory under $TMPDIR (removed afterwards)
  // Pin rank r to the r-th CPU this process may use, when there are at least `world` of
  // them (what mpirun does by default): two ranks never share a core then.
  bool bind_to_cores = false;
};

std::vector<RankExit> run_local_ranks(const LocalLaunch& launch);

// For a child: RF_RANK / RF_WORLD / RF_STORE, throwing rf::InvalidInput naming a missing
// or malformed variable.
struct RankEnv {
  int rank = 0;
  int world = 1;
  std::string store_dir;
};
RankEnv rank_env_from_environment();

}  // namespace rf::comm
