// register_cuda_comm in a build with CUDA: the NCCL backend (when NCCL was found at
// configure time, RINGFENCE_HAVE_NCCL), the UCX fallback's device staging and registered
// device memory.
#include "comm/cuda/register.h"

#include "comm/cuda/device_memory.h"
#include "comm/cuda/device_staging.h"
#include "comm/device_backends.h"
#if RINGFENCE_HAVE_NCCL
#include "comm/nccl/nccl_communicator.h"
#endif

namespace rf::comm {

void register_cuda_comm() {
  DeviceBackends b;
#if RINGFENCE_HAVE_NCCL
  b.make_nccl = &nccl::make_nccl_communicator;
  b.prepare_nccl = &nccl::prepare_nccl;
#endif
  b.stage_device_buffers = &cuda::stage_device_buffers;
  b.allocate_device = &cuda::allocate_device_registered;
  set_device_backends(b);
}

bool cuda_comm_built() { return true; }

}  // namespace rf::comm
