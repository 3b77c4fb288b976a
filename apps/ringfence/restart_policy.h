#pragma once
// Whether `ringfence run` restarts a worker that exited non-zero after it registered: a
// pure function of the slot's failures and the options, unit-tested.
//
// A worker that fails with the same error after each of two restarts will fail so again:
// restarting it until --max-restarts is spent only ends, --min-world-timeout later, in a
// job stopped for want of members, its cause nowhere in the launcher's output (a full disk
// lost all work after the newest checkpoint so). The job then stops at once with that error, or,
// where --min-world allows, goes on without the slot and says so. Each exit's error is the
// one the worker wrote to RINGFENCE_ERROR_FILE (elastic/error_file.h); an exit without one
// (a signal, a worker that said nothing) never counts as the same error.
#include <string>
#include <vector>

namespace rf::apps {

enum class RestartAction { Restart, NoRestartsLeft, GoOnWithout, StopJob };
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

}  // namespace rf::apps
