#pragma once
// train_mlp / train_cnn under `ringfence run`: the same model, data, loss and optimizer as
// the single-process loop (train_setup.h), trained by the resilient data-parallel
// ddp::Trainer. Every worker builds the identical initial state from --seed; the global
// batch of step s is the same as in one process (R3), split over the ranks. A worker that
// dies is replaced by the launcher and pulls the state from a peer; a run with failures
// ends bitwise equal to the failure-free run with the same world size.
//
// Which worker reports: rank 0 of the last generation prints the test accuracy and writes
// --metrics; the worker in slot 0 (rank 0 from the start, replaced in place) writes
// --loss-log (the global mean loss of each step) and --batch-log. Every worker prints its
// final (step, state digest) line, so replicas can be compared.
#include <iosfwd>
#include <string>
#include <utility>

#include "ddp/trainer.h"
#include "models/device_choice.h"
#include "models/train_loop.h"

namespace rf::models {

// Whether `ringfence run` started this process: ddp::launched_by_ringfence (ddp/trainer.h).
using ddp::launched_by_ringfence;

// This worker among its launcher's workers on this host: RINGFENCE_LOCAL_RANK and
// RINGFENCE_LOCAL_WORLD (a launcher that sets neither: rank 0 of 1). FlagError when
// malformed.
LocalPlacement local_placement_from_env();
// Who this worker is in the job: RINGFENCE_SLOT and RINGFENCE_INCARNATION (0 when unset).
std::pair<int, int64_t> worker_id_from_env();

// A start-up refusal every worker and every restart would meet again (e.g. --device): joins
// the job and reports it to the coordinator as fatal, which STOPs the job with `error` (the
// launcher's last line), so nothing is restarted. Best effort: a coordinator out of reach
// is said on `err`, and the launcher's start-up rule ends the job instead (docs/launcher.md).
void stop_job_before_start(const std::string& error, std::ostream& err);

// Throws rf::InvalidInput for flags the data-parallel path cannot honour (--resume-from,
// --ckpt-test-pause-in-write), elastic::JobStopped when the coordinator stopped the job,
// ddp::DivergenceError when replicas differ.
// alone: the same trainer without `ringfence run` (one rank, no fault tolerance), for
// --exact by hand: its digest is the one every W gives.
TrainResult train_distributed(const TrainOptions& opt, std::ostream& log, bool alone = false);

}  // namespace rf::models
