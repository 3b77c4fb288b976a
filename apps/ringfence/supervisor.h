#pragma once
// Supervisor — `ringfence run`: starts the embedded coordinator (or joins a remote one),
// spawns this node's workers with their environment, restarts a worker that dies (new
// incarnation, same slot), SIGKILLs a worker the coordinator evicted as hung before
// replacing it, executes the launcher-side fault specs (at=), turns SIGINT/SIGTERM into
// a graceful stop, prints the live status line and the summary, and returns the exit code.
#include "elastic/launch_options.h"

namespace rf::apps {

int run_supervisor(const rf::elastic::RunOptions& options);

}  // namespace rf::apps
