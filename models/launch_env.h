#pragma once
// What train_mlp / train_cnn read of the launcher's environment under `ringfence run`, and
// how a worker stops the whole job before training (a refusal every worker would meet).
#include <iosfwd>
#include <string>
#include <utility>

#include "ddp/trainer.h"
#include "models/device_choice.h"

namespace rf::models {

// Whether `ringfence run` started this process: ddp::launched_by_ringfence (ddp/trainer.h).
using ddp::launched_by_ringfence;

// What the launcher tells this worker (elastic/worker_env.h, read once; FlagError when a
// value is malformed): its place among its launcher's workers on this host
// (RINGFENCE_LOCAL_RANK, _LOCAL_WORLD; rank 0 of 1 when unset), who it is in the job
// (RINGFENCE_SLOT, _INCARNATION), whether the job had run when it started (RINGFENCE_JOB_RAN:
// a restart, docs/launcher.md) and its fault specs (RINGFENCE_INJECT).
LocalPlacement local_placement_from_env();
std::pair<int, int64_t> worker_id_from_env();
bool job_ran_from_env();
std::string inject_from_env();

// A start-up refusal every worker and every restart would meet again (e.g. --device): joins
// the job and reports it to the coordinator as fatal, which STOPs the job with `error` (the
// launcher's last line), so nothing is restarted. Best effort: a coordinator out of reach
// is said on `err`, and the launcher's start-up rule ends the job instead (docs/launcher.md).
void stop_job_before_start(const std::string& error, std::ostream& err);

}  // namespace rf::models
