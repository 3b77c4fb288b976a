#pragma once
// Which device a train_mlp / train_cnn process computes on, from --device, --backend, the
// GPUs this machine has and, under `ringfence run`, where the worker stands among the
// host's workers. Pure: the program's main() asks CUDA how many GPUs there are, and
// launch_env.h reads the launcher's environment (RINGFENCE_LOCAL_RANK,
// RINGFENCE_LOCAL_WORLD, RINGFENCE_SLOT, RINGFENCE_INCARNATION).
//
// `--device cuda` (no index) is cuda:0 by hand, and under the launcher the GPU of its local
// rank: cuda:(local_rank % gpus), round-robin, so more local workers than GPUs share them.
// Processes sharing a GPU work with the UCX backend (each stages its buckets through pinned
// host memory); NCCL refuses two ranks on one GPU, so `--backend nccl` with more local
// workers than GPUs (or every local worker on one named cuda:N) is an error before the
// worker joins the job.
//
// Test override, off by default (docs/gpu.md, "W ranks on one GPU"): RF_TEST_NCCL_SHARE_GPU=1
// in the launcher's environment turns that refusal into a one-line warning. NCCL itself
// refuses two ranks of one host on one GPU ("Duplicate GPU detected"), but takes the host's
// identity from NCCL_HOSTID: each worker then gets its own (from its slot and incarnation)
// and NCCL's loopback socket transport (NCCL_P2P_DISABLE=1, NCCL_SHM_DISABLE=1,
// NCCL_NET=Socket, NCCL_SOCKET_IFNAME=lo), every variable only where the environment does not
// set it already. Every rank is then "another host": right for testing init, revocation,
// shrink, kills and hangs with NCCL on one GPU, meaningless for timing.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "core/device.h"

namespace rf::models {

// The test override's variable (above). Not RINGFENCE_*: the launcher hands its workers its
// own environment without those (docs/launcher.md), and this one must reach them.
inline constexpr const char* kNcclShareGpuEnv = "RF_TEST_NCCL_SHARE_GPU";

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
  bool nccl_share_gpu = false;  // RF_TEST_NCCL_SHARE_GPU=1 (nccl_share_gpu_from)
  int slot = 0;                 // under ringfence run, who this worker is in the job
  int64_t incarnation = 0;      // (RINGFENCE_SLOT, _INCARNATION): the override's NCCL host id
};

// The device, and what the process must do before it computes there: a warning for stderr
// (one line, empty when none) and environment variables to set before any NCCL call, each
// only when not set already (setenv(name, value, 0)), in this order.
struct DeviceChoice {
  Device device = Device::CPU;
  std::string warning;
  std::vector<std::pair<std::string, std::string>> env;
};

// The choice, or FlagError (models/train_flags.h) naming the flag: no GPU (with the reason),
// a GPU index this machine lacks, --backend nccl on the CPU, or NCCL with two local ranks on
// one GPU (unless request.nccl_share_gpu: then the warning and the NCCL environment above).
DeviceChoice decide_device(const DeviceRequest& request);
// decide_device(request).device.
Device choose_device(const DeviceRequest& request);

// RF_TEST_NCCL_SHARE_GPU's value: "1" is on; unset (null), "" and "0" are off; anything else
// is a FlagError naming the variable.
bool nccl_share_gpu_from(const char* value);

// The NCCL host id of a worker under the override: distinct for every process of the job.
std::string nccl_test_host_id(int slot, int64_t incarnation);

}  // namespace rf::models
