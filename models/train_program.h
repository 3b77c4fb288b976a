#pragma once
// The body of train_mlp / train_cnn after the flags: training by hand (one process,
// train_loop.h) or under `ringfence run` (data-parallel, distributed_train.h), chosen by
// RINGFENCE_COORD in the environment. Returns the exit code: 0 ok, 1 failure (missing
// data, a bad --init file, a job the coordinator stopped, ...), with the error on `err`.
// Process-wide settings (signal handlers, GEMM threads, malloc tuning) are not made
// here: they belong to the program's main() (train_main.cpp).
#include <iosfwd>

#include "models/train_loop.h"

namespace rf::models {

int run_train_program(const TrainOptions& opt, std::ostream& out, std::ostream& err);

}  // namespace rf::models
