#pragma once
// The body of train_mlp / train_cnn after the flags: training by hand (one process,
// train_loop.h) or under `ringfence run` (data-parallel, distributed_train.h), chosen by
// RINGFENCE_COORD in the environment. Returns the exit code: 0 ok, 1 failure (missing
// data, a bad --init file, a job the coordinator stopped, ...), 2 when --device cannot be
// had here (models/device_choice.h), with the error on `err`. Under `ringfence run` that
// refusal also stops the job with its message (the coordinator's `fatal`). Process-wide
// settings (signal handlers, GEMM threads, malloc tuning, the CUDA registrations) are not
// made here: they belong to the program's main() (train_main.cpp).
#include <iosfwd>
#include <string>

#include "models/train_loop.h"

namespace rf::models {

// What CUDA says of this machine (rf::cuda_device_count(), rf::cuda_unavailable_reason()):
// the program's main() asks when --device names a GPU.
struct GpuInventory {
  int gpus = 0;
  std::string no_gpu_reason;
};

int run_train_program(TrainOptions opt, const GpuInventory& inventory, std::ostream& out, std::ostream& err);

}  // namespace rf::models
