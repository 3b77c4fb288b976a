#pragma once
// Storage — a block of memory that tensors view (with an offset). Either owned (from the
// device's caching allocator, runtime(device).allocator(), returned to that same allocator
// on destruction) or external: a pointer into memory
// someone else owns, e.g. the ddp layer's flat gradient bucket (a parameter's grad is a
// view into it, so backward accumulates straight into the buffer that gets all-reduced).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

#include "core/device.h"

namespace rf {
class DeviceAllocator;
}

namespace rf {

class Storage {
 public:
  // Uninitialised memory for `bytes` bytes from the device's caching allocator.
  static std::shared_ptr<Storage> allocate(size_t bytes, Device device = Device::CPU);
  // Views external memory. Without `owner` the caller keeps it alive longer than every
  // tensor using it; with one, the Storage holds `owner` (whatever object owns the memory)
  // until the last view is gone.
  static std::shared_ptr<Storage> wrap(void* data, size_t bytes, Device device = Device::CPU,
                                       std::shared_ptr<const void> owner = {});

  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  template <typename T = float>
  T* data() const { return static_cast<T*>(data_); }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  bool owned() const { return allocator_ != nullptr; }

 private:
  Storage(void* data, size_t bytes, Device device, DeviceAllocator* allocator,
          std::shared_ptr<const void> owner = {})
      : data_(data), bytes_(bytes), device_(device), allocator_(allocator), owner_(std::move(owner)) {}
  void* data_;
  size_t bytes_;
  Device device_;
  DeviceAllocator* allocator_;  // where owned memory goes back to; null when external
  std::shared_ptr<const void> owner_;  // keeps wrapped memory alive (wrap with an owner)
};

}  // namespace rf
