#include "models/device_choice.h"

#include "base/str.h"
#include "models/train_flags.h"

namespace rf::models {

Device choose_device(const DeviceRequest& r) {
  const bool nccl = r.backend == comm::Backend::Nccl;
  if (r.device.is_cpu()) {
    if (nccl) throw FlagError("--backend nccl: needs a GPU (--device cuda or cuda:N)");
    return Device::CPU;
  }
  const std::string flag = r.any_gpu ? std::string("--device cuda") : str("--device ", device_name(r.device));
  if (r.gpus <= 0)
    throw FlagError(str(flag, ": no CUDA device to use (", r.no_gpu_reason.empty() ? "none found" : r.no_gpu_reason, ")"));
  if (!r.any_gpu && r.device.index >= r.gpus)
    throw FlagError(str(flag, ": no such GPU on this machine (", r.gpus, " found: cuda:0 to cuda:", r.gpus - 1, ")"));
  if (!r.local) return r.any_gpu ? Device::cuda(0) : r.device;

  const LocalPlacement& l = *r.local;
  if (l.local_world < 1 || l.local_rank < 0 || l.local_rank >= l.local_world)
    throw FlagError(str(flag, ": the launcher says local rank ", l.local_rank, " of ", l.local_world,
                        " (RINGFENCE_LOCAL_RANK, RINGFENCE_LOCAL_WORLD)"));
  // The ranks of this host on distinct GPUs: round-robin over every GPU, or all on one named.
  const int gpus_used = r.any_gpu ? r.gpus : 1;
  if (nccl && l.local_world > gpus_used)
    throw FlagError(str("--backend nccl: NCCL refuses two ranks on one GPU: ", l.local_world,
                        " ranks on this host share ", gpus_used, " GPU(s); use --backend ucx or fewer ranks per host",
                        r.any_gpu ? "" : str(" (or --device cuda for one GPU per rank)")));
  return r.any_gpu ? Device::cuda(l.local_rank % r.gpus) : r.device;
}

}  // namespace rf::models
