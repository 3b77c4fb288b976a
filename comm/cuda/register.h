#pragma once
// register_cuda_comm — installs comm's CUDA halves (comm/device_backends.h): the NCCL
// backend (comm/nccl/nccl_communicator.h), the UCX fallback for device buffers through
// pinned host staging (comm/cuda/device_staging.h) and registered device memory
// (comm/cuda/device_memory.h). Library rf_comm_cuda; a program that wants a GPU calls it
// once, next to rf::register_cuda_runtime(). In a build without CUDA it installs nothing,
// and make_communicator then says the build has no CUDA.
namespace rf::comm {

void register_cuda_comm();
// True when this build has comm's CUDA halves (register_cuda_comm() installs something).
bool cuda_comm_built();

}  // namespace rf::comm
