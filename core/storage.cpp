#include "core/storage.h"

#include "core/device_runtime.h"

namespace rf {

std::shared_ptr<Storage> Storage::allocate(size_t bytes, Device device) {
  DeviceAllocator& a = runtime(device, "Storage::allocate").allocator();
  void* p = a.allocate(bytes);
  return std::shared_ptr<Storage>(new Storage(p, bytes, device, &a));
}

std::shared_ptr<Storage> Storage::wrap(void* data, size_t bytes, Device device,
                                       std::shared_ptr<const void> owner) {
  return std::shared_ptr<Storage>(new Storage(data, bytes, device, nullptr, std::move(owner)));
}

Storage::~Storage() {
  if (allocator_) allocator_->release(data_, bytes_);
}

}  // namespace rf
