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

#include "models/train_loop.h"

namespace rf::models {

// True when `ringfence run` started this process (RINGFENCE_COORD is set).
bool launched_by_ringfence();

// Throws rf::InvalidInput for flags the data-parallel path cannot honour (--resume-from,
// --ckpt-test-pause-in-write), elastic::JobStopped when the coordinator stopped the job,
// ddp::DivergenceError when replicas differ.
TrainResult train_distributed(const TrainOptions& opt, std::ostream& log);

}  // namespace rf::models
