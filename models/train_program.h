#pragma once
// The body of train_mlp / train_cnn after the flags: the device, then training
// (models/train.h), by hand (one process) or under `ringfence run` (data-parallel), as
// RINGFENCE_COORD in the environment says. Returns the exit code: 0 ok, 1 failure (missing
// data, a bad --init file, a job the coordinator stopped, ...), 2 when --device cannot be
// had here (models/device_choice.h) or --inject asks what it cannot do (gpu_hang on the
// CPU), with the error on `err`. Under `ringfence run` that refusal also stops the job with
// its message (the coordinator's `fatal`). Process-wide settings (signal handlers, GEMM
// threads, malloc tuning, the CUDA registrations) belong to the program's main()
// (train_main.cpp); made here are only those that follow from the device chosen: the NCCL
// environment of the test override RF_TEST_NCCL_SHARE_GPU and gpu_hang's action
// (ddp::set_gpu_hang_action).
#include <iosfwd>
#include <string>

#include "models/train_options.h"

namespace rf::models {

// What CUDA says of this machine (rf::cuda_device_count(), rf::cuda_unavailable_reason()),
// and how to make a GPU stuck for --inject gpu_hang (ddp/gpu_hang.h: a kernel that never ends
// on `stream` of GPU `device`): the program's main() fills it when --device names a GPU.
struct GpuInventory {
  int gpus = 0;
  std::string no_gpu_reason;
  void (*hang_stream)(int device, void* stream) = nullptr;
};

int run_train_program(TrainOptions opt, const GpuInventory& inventory, std::ostream& out, std::ostream& err);

}  // namespace rf::models
