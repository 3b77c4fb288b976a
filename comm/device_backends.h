#pragma once
// Where comm's CUDA halves plug into make_communicator, prepare_backend and
// allocate_registered (comm/communicator.h). rf_comm itself links no CUDA: a program that
// wants a GPU links rf_comm_cuda and calls register_cuda_comm() (comm/cuda/register.h),
// which installs these. Without them the factory's errors say what is missing (this
// build has no CUDA, or the program did not register the CUDA halves).
#include <cstddef>
#include <memory>

#include "comm/communicator.h"

namespace rf::comm {

struct DeviceBackends {
  // Backend::Nccl: the communicator of o.generation on GPU o.device_index.
  std::shared_ptr<Communicator> (*make_nccl)(const CommOptions& o) = nullptr;
  // prepare_backend(Backend::Nccl): the process-wide NCCL state (loads the library,
  // checks its version), so the first generation does not pay for it.
  void (*prepare_nccl)() = nullptr;
  // Backend::Ucx with o.device == Device::cuda: `host` (the generation's UCX communicator)
  // wrapped so that device buffers go through pinned host staging; host buffers pass
  // straight through.
  std::shared_ptr<Communicator> (*stage_device_buffers)(std::shared_ptr<Communicator> host, const CommOptions& o) =
      nullptr;
  // allocate_registered(bytes, Device::cuda, index).
  std::shared_ptr<RegisteredMemory> (*allocate_device)(size_t bytes, int index) = nullptr;
};

// Installs `b` for the whole process (thread-safe; a later call replaces it).
void set_device_backends(const DeviceBackends& b);
DeviceBackends device_backends();

}  // namespace rf::comm
