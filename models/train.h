#pragma once
// The training of train_mlp / train_cnn: one loop, ddp::Trainer's (docs/ddp.md), run two ways.
//
// By hand (no launcher: ddp::launched_by_ringfence() is false) the trainer runs one rank
// without fault tolerance or coordinator: the global batch of step s is the sampler's, a pure
// function of (seed, s) (docs/protocol.md R3), the loss is the cross-entropy SUM over it and
// the reducer divides the gradients by its size before SGD with momentum. So a run by hand
// ends with the state `ringfence run -n 1` ends with, bit for bit, given the same flags
// (tests/models/hand_vs_run_test.py). The program prints a progress line every
// --log-interval steps and the test accuracy at the end on `log`; checkpoints (--ckpt-dir,
// --resume, --resume-from) are the trainer's: a resumed run continues at the checkpoint's
// step + 1 with the same batches and ends bitwise identical to an uninterrupted one. SIGTERM /
// SIGINT (TrainOptions::stop_requested) stop it after the step in flight, checkpointed.
// --cuda-graph replaces the trainer's step with GraphStep's (models/graph_step.h, the
// trainer's local step: the same arithmetic, captured as a CUDA graph and replayed).
//
// Under `ringfence run` W workers train the same model on the same data, data-parallel and
// resilient: every worker builds the identical initial state from --seed; the global batch
// of step s is split over the ranks. A worker that dies is replaced by the launcher and pulls
// the state from a peer; a run with failures ends bitwise equal to the failure-free run with
// the same world size. Rank 0 of the last generation prints the test accuracy and writes
// --metrics; the worker in slot 0 (rank 0 from the start, replaced in place) writes
// --loss-log (the global mean loss of each step) and --batch-log; rank 0's trainer logs the
// progress lines.
//
// Either way every process prints its final (step, state digest) line, `== train_mlp slot S
// incarnation I: step ..., state DIGEST`, so replicas can be compared.
#include <iosfwd>

#include "models/train_options.h"

namespace rf::models {

// Throws rf::InvalidInput for flags the way it runs cannot honour (by hand: --verify-every,
// --audit-log, --flight-dir; under ringfence run: --resume-from,
// --ckpt-test-pause-in-write), elastic::JobStopped when the coordinator stopped the job,
// ddp::DivergenceError when replicas differ, ckpt::CheckpointWriteFailed when the final
// state could not be checkpointed.
TrainResult train(const TrainOptions& opt, std::ostream& log);

}  // namespace rf::models
