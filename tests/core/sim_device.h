#pragma once
// SimDevice — a DeviceRuntime for cuda:0 backed by host memory and the CPU op table, so a
// machine without a GPU can run the code paths core and ddp take for a non-CPU device:
// Tensor::to and back, host_view's blocking read, fences and counted waits. Its memory is
// a separate caching allocator (a CUDA tensor's data is never the CPU allocator's).
//
//   ScopedSimDevice sim;                  // runtime(Device::CUDA) is the simulator now
//   Tensor g = x.to(Device::CUDA);        // "device" memory, same bits
//   CHECK(sim.rt.sync_counts().reads == 0);
//
// Its tensors must be released while the simulator is installed (their Storage returns
// memory to its allocator, which lives for the whole process, so a late release is safe).
#include <atomic>
#include <cstring>

#include "core/allocator.h"
#include "core/device_runtime.h"
#include "kernels/cpu/table.h"

namespace rf::testing {

class SimDevice final : public DeviceRuntime {
 public:
  Device device() const override { return Device::CUDA; }
  const kernels::OpTable& ops() const override { return kernels::cpu_table(); }
  DeviceAllocator& allocator() override { return memory(); }
  kernels::Stream stream() const override { return nullptr; }

  void write(void* dst, const void* src, size_t bytes) override {
    ++writes;
    copy(dst, src, bytes);
  }
  void read(void* dst, const void* src, size_t bytes) override {
    ++reads_;
    copy(dst, src, bytes);
  }
  void read_async(void* dst, const void* src, size_t bytes) override {
    ++async_reads;
    copy(dst, src, bytes);
  }
  void record(Fence& f) override { ++f.serial; }
  void wait(Fence&) override { ++fence_waits_; }
  void synchronize() override { ++synchronize_; }
  void* host_staging(size_t bytes) override { return CachingAllocator::host().allocate(bytes); }
  void free_host_staging(void* p, size_t bytes) override { CachingAllocator::host().release(p, bytes); }
  SyncCounts sync_counts() const override { return {synchronize_.load(), reads_.load(), fence_waits_.load()}; }

  std::atomic<int64_t> writes{0}, async_reads{0};

 private:
  // One for the process: storages released after a SimDevice is gone still have it.
  static CachingAllocator& memory() {
    static CachingAllocator* a = new CachingAllocator();
    return *a;
  }
  static void copy(void* dst, const void* src, size_t bytes) {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  }
  std::atomic<int64_t> synchronize_{0}, reads_{0}, fence_waits_{0};
};

// Installs a SimDevice as cuda:0's runtime for its lifetime.
struct ScopedSimDevice {
  SimDevice rt;
  RuntimeOverride installed{rt};
};

}  // namespace rf::testing
