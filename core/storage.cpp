#include "core/storage.h"

#include "base/error.h"
#include "core/allocator.h"

namespace rf {

std::shared_ptr<Storage> Storage::allocate(size_t bytes, Device device) {
  if (device != Device::CPU)
    throw Error("CUDA storage is not available yet: core has only CPU kernels (issue 2)");
  void* p = CachingAllocator::host().allocate(bytes);
  return std::shared_ptr<Storage>(new Storage(p, bytes, device, true));
}

std::shared_ptr<Storage> Storage::wrap(void* data, size_t bytes, Device device,
                                       std::shared_ptr<const void> owner) {
  return std::shared_ptr<Storage>(new Storage(data, bytes, device, false, std::move(owner)));
}

Storage::~Storage() {
  if (owned_) CachingAllocator::host().release(data_, bytes_);
}

}  // namespace rf
