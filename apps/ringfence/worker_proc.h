#pragma once
// What `ringfence run` knows of each worker slot it runs (the supervisor's records), and
// how it starts one: fork and exec in its own process group, dying with the launcher.
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/ringfence/restart_policy.h"
#include "base/clock.h"

namespace rf::apps {

// One slot this launcher runs: its current process, its history (exits, spawns, the errors
// its processes said), and what holds its next start.
struct WorkerProc {
  int slot = 0;
  int local_rank = 0;  // index among this launcher's processes (workers, then spares)
  bool spare = false;
  int64_t incarnation = 0;
  pid_t pid = -1;
  int restarts = 0;
  bool done = false;  // exited 0, or out of restarts: not restarted
  bool start_error = false;  // its last exit: an error status before it registered, before the job first ran
  std::set<int64_t> killed_as_hung;
  nlohmann::json exits = nlohmann::json::array();
  std::vector<std::string> errors;  // each non-zero exit's RINGFENCE_ERROR_FILE ("" : none), oldest first
  nlohmann::json spawns = nlohmann::json::array();  // {incarnation, wall_us, reason}: when each incarnation started, and why then
  // A restart held back while a spare fills the hole (restart_policy.h).
  using Held = HeldRestart;
  std::optional<Held> held;
  std::optional<int> evicted_finished;  // recoveries finished as of the eviction (its snapshot)
  bool evicted_was_member = false;
};

// What the launcher last saw of a RUNNING generation: who the members were and how many
// recoveries had finished. A failure is judged against it (whether the worker was a
// member; spares are what the coordinator lists as standby, see spare_available).
struct RunningSnapshot {
  bool seen = false;
  std::set<std::pair<int, int64_t>> members;
  int finished = 0;
};

// Starts argv[0] (looked up in PATH) with exactly `env`, in its own process group (Ctrl-C
// reaches only the launcher, which stops gracefully), SIGKILLed when the launcher dies.
// Returns its pid; rf::Error when fork fails. An exec failure is the child's exit 127,
// with "ringfence: cannot run '...'" on stderr.
// ignore_stop_signals: the worker starts with SIGTERM and SIGINT ignored (under Slurm, where
// a step's signal reaches every process of the step and the launcher owns the stop).
pid_t spawn_process(const std::vector<std::string>& argv, std::vector<std::string> env,
                    bool ignore_stop_signals = false);

// A wait status as the launcher reports it: the exit code, or minus the signal.
int exit_status_of(int wait_status);

}  // namespace rf::apps
