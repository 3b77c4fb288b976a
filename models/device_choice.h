#pragma once
// Which device a train_mlp / train_cnn process computes on, from --device, --backend, the
// GPUs this machine has and, under `ringfence run`, where the worker stands among the
// host's workers. Pure: the program's main() asks CUDA how many GPUs there are, and
// distributed_train.h reads the launcher's environment (RINGFENCE_LOCAL_RANK,
// RINGFENCE_LOCAL_WORLD).
//
// `--device cuda` (no index) is cuda:0 by hand, and under the launcher the GPU of its local
// rank: cuda:(local_rank % gpus), round-robin, so more local workers than GPUs share them.
// Processes sharing a GPU work with the UCX backend (each stages its buckets through pinned
// host memory); NCCL refuses two ranks on one GPU, so `--backend nccl` with more local
// workers than GPUs (or every local worker on one named cuda:N) is an error before the
// worker joins the job.
#include <optional>
#include <string>

#include "comm/communicator.h"
#include "core/device.h"

namespace rf::models {

// This worker among the workers its launcher runs on this host (workers, then spares).
struct LocalPlacement {
  int local_rank = 0;
  int local_world = 1;
};

struct DeviceRequest {
  Device device = Device::CPU;  // --device (cuda:0 for a bare "cuda")
  bool any_gpu = false;         // --device cuda without an index: the launcher's choice
  comm::Backend backend = comm::Backend::Ucx;
  int gpus = 0;                 // rf::cuda_device_count()
  std::string no_gpu_reason;    // rf::cuda_unavailable_reason() when gpus is 0
  std::optional<LocalPlacement> local;  // set under ringfence run
};

// The device to compute on, or FlagError (models/train_flags.h) naming the flag: no GPU
// (with the reason), a GPU index this machine lacks, --backend nccl on the CPU, or NCCL
// with two local ranks on one GPU.
Device choose_device(const DeviceRequest& request);

}  // namespace rf::models
