#pragma once
// Registered device memory (comm::allocate_registered(bytes, Device::cuda, index)): one
// cudaMalloc'd block on GPU `index`, zero-filled, freed when the last holder lets go.
#include <cstddef>
#include <memory>

#include "comm/types.h"

namespace rf::comm::cuda {

// Throws rf::Error naming the GPU and the size when the allocation fails, rf::InvalidInput
// for a GPU index this machine does not have.
std::shared_ptr<RegisteredMemory> allocate_device_registered(size_t bytes, int index);

}  // namespace rf::comm::cuda
