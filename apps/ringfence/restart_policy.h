#pragma once
// What `ringfence run` does about a worker's exit: decide_exit, a pure function of the exit
// (its status, what the coordinator knew of the process, the slot's history), the job as
// the launcher last saw it, and the options, unit-tested; the supervisor's reap() only
// carries it out. Within it, decide_restart says whether a worker that exited non-zero
// after it registered is restarted.
//
// A worker that fails with the same error after each of two restarts will fail so again:
// restarting it until --max-restarts is spent only ends, --min-world-timeout later, in a
// job stopped for want of members, its cause nowhere in the launcher's output (a full disk
// lost all work after the newest checkpoint so). The job then stops at once with that error, or,
// where --min-world allows, goes on without the slot and says so. Each exit's error is the
// one the worker wrote to RINGFENCE_ERROR_FILE (elastic/error_file.h); an exit without one
// (a signal, a worker that said nothing) never counts as the same error.
#include <cstdint>
#include <optional>

#include <string>
#include <vector>

#include "base/clock.h"
#include "base/enum_names.h"

namespace rf::apps {

enum class RestartAction { Restart, NoRestartsLeft, GoOnWithout, StopJob };
inline constexpr EnumName<RestartAction> kRestartActionNames[] = {
    {RestartAction::Restart, "restart"}, {RestartAction::NoRestartsLeft, "no_restarts_left"},
    {RestartAction::GoOnWithout, "go_on_without"}, {RestartAction::StopJob, "stop_job"}};
static_assert(lists_each_once(kRestartActionNames));
const char* to_string(RestartAction a);

inline constexpr int kSameErrorRestarts = 2;  // restarts that failed as the first exit did

struct RestartInput {
  int slot = 0;
  std::vector<std::string> errors;  // each failed exit of the slot, oldest first, this one last ("" : none told)
  int restarts = 0;                 // restarts the slot had before this exit
  int max_restarts = 3;
  int others = 0;                   // members of the last running generation besides this slot
  int min_world = 1;
};

struct RestartDecision {
  RestartAction action = RestartAction::Restart;
  std::string reason;  // for StopJob (the job's error) and GoOnWithout (the launcher's note)
};

RestartDecision decide_restart(const RestartInput& in);

// The error with every run of digits read as '#': the same failure at another step, in
// another file or process ("ckpt-000000199", "ckpt-000000299") is the same error.
std::string error_signature(const std::string& error);

// One process exit, with what the coordinator's exited_reply said of it.
struct WorkerExit {
  int slot = 0;
  int64_t incarnation = 0;
  int status = 0;               // the exit code, or minus the signal
  bool registered = false;      // its join was accepted at some point
  bool left = false;            // it had left the job gracefully first
  bool start_error_before = false;  // the slot's previous exit was an error status before it registered
  int restarts = 0;             // restarts the slot had before this exit
  std::vector<std::string> errors;  // each failed exit's error, oldest first, this one last
};

// The job as the launcher saw it when the process exited.
struct JobView {
  bool ran = false;       // a generation was RUNNING at some point
  bool done = false;      // the coordinator's phase is DONE
  bool over = false;      // DONE, STOPPED, or ended by the launcher
  bool stopping = false;  // a graceful stop was asked for (Ctrl-C)
  int others = 0;         // members the job keeps without this slot
  bool was_member = false;      // the process was a member of the last RUNNING generation
  bool spare_available = false;  // a spare of this node stands by to take its place
};

struct RestartOptions {
  int max_restarts = 3;
  int min_world = 1;
};

enum class ExitAction {
  Finished,        // not restarted: it exited 0, the job is over or stopping, or it had left
  Restart,         // restarted at once as a new incarnation
  RestartHeld,     // restarted once the recovery its spare joins has completed
  NoRestartsLeft,  // not restarted: --max-restarts is spent
  GoOnWithout,     // not restarted: the job goes on without the slot (note says so)
  StopJob,         // the job ends with `error`
};
inline constexpr EnumName<ExitAction> kExitActionNames[] = {
    {ExitAction::Finished, "finished"},
    {ExitAction::Restart, "restart"},
    {ExitAction::RestartHeld, "restart_held"},
    {ExitAction::NoRestartsLeft, "no_restarts_left"},
    {ExitAction::GoOnWithout, "go_on_without"},
    {ExitAction::StopJob, "stop_job"},
};
static_assert(lists_each_once(kExitActionNames));
const char* to_string(ExitAction a);

struct ExitDecision {
  ExitAction action = ExitAction::Finished;
  std::vector<std::string> notes;  // the launcher's notes, in order
  std::string late_failure;        // a non-zero exit after the job was DONE or after it left ("" : none)
  std::string error;               // StopJob: the job's error
  std::optional<int> start_failure;  // StopJob before the job ran: the job's exit status
  bool start_error = false;        // this exit was an error status before it registered
};

ExitDecision decide_exit(const WorkerExit& exit, const JobView& job, const RestartOptions& options);

// A restart held back while a spare of this node fills the hole (ExitAction::RestartHeld):
// it starts once the recovery has completed (the new generation RUNNING and one step past
// its target), so its start-up does not compete with the survivors' transfer for the cores.
struct HeldRestart {
  TimePoint since;
  int finished = 0;               // recoveries finished before the failure
  std::optional<int64_t> target;  // T of the recovery that finished since (the summary's)
};

// The coordinator's status as a held restart is judged by.
struct HeldView {
  bool running = false;  // the phase is RUNNING
  int finished = 0;      // recoveries finished so far
  uint64_t generation = 0;
  int64_t step = -1;
  int spares_missing = 0;  // held restarts beyond the standbys left to serve them
};

enum class HeldAction {
  Wait,        // keeps waiting
  NeedTarget,  // a recovery finished: its target step T is needed (the summary's) to judge
  Start,       // starts now, for `reason`
};
inline constexpr EnumName<HeldAction> kHeldActionNames[] = {
    {HeldAction::Wait, "wait"}, {HeldAction::NeedTarget, "need_target"}, {HeldAction::Start, "start"}};
static_assert(lists_each_once(kHeldActionNames));
const char* to_string(HeldAction a);

struct HeldDecision {
  HeldAction action = HeldAction::Wait;
  std::string reason;
  bool next_spare = true;  // false: it starts because its spare is gone, not as the next spare
};

// Starts when the recovery has completed, or when the spare it waited for is gone before,
// or after `min_world_timeout` without either (bounded).
HeldDecision decide_held_release(TimePoint now, const HeldRestart& held, const HeldView& view,
                                 Duration min_world_timeout);

}  // namespace rf::apps
