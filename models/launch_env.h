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
// Whether the fault specs `inject` (RINGFENCE_INJECT's text) make this worker's GPU stuck
// (gpu_hang). Such a worker loads every CUDA module at start (main() sets
// CUDA_MODULE_LOADING=EAGER before CUDA starts): a module loaded lazily behind the kernel
// that never ends would block its host thread, and the fault would not be the one it names
// (a stuck GPU under a host that goes on). Malformed specs: false (they are refused later,
// with their error).
bool injects_gpu_hang(const std::string& inject);

// A start-up refusal every worker and every restart would meet again (e.g. --device): joins
// the job and reports it to the coordinator as fatal, which STOPs the job with `error` (the
// launcher's last line), so nothing is restarted. Best effort: a coordinator out of reach
// is said on `err`, and the launcher's start-up rule ends the job instead (docs/launcher.md).
void stop_job_before_start(const std::string& error, std::ostream& err);

}  // namespace rf::models
