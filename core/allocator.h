#pragma once
// CachingAllocator — host memory that is allocated once and reused.
//
// Why: on these machines a first touch of a 4 KiB page costs ~13 us, so a training step
// that mallocs and frees its activations, gradients and im2col buffers each time spends
// most of its time in page faults. Freed blocks go back to a free list keyed by their
// (rounded) size; the next request of that size reuses one (core/free_lists.h). After the first step every
// step's requests are met from the cache and nothing is faulted again. Memory others
// malloc (Eigen's GEMM packing buffers) is covered by rf::tune_malloc_for_training()
// (core/malloc_tuning.h), an explicit opt-in the allocator never calls itself.
//
// A fresh block of kPopulateMinBytes or more is made resident when it is obtained, by
// rf::populate_pages (madvise(MADV_POPULATE_WRITE) in bounded 16 MiB calls): the kernel
// faults the pages in a loop, cheaper than one trap per page at the first write (800 MB:
// 0.41-0.55 s against 0.69-0.78 s, bench/RESULTS.md), and never in one long call that
// would stall the process's other threads (the heartbeat). Smaller blocks fault as used.
//
// Blocks are 64-byte aligned (AVX-512 lines). Thread-safe (one mutex; allocations are
// per-op, not per-element). The process-wide instance lives forever, so tensors released
// during static destruction still have somewhere to go. It is the CPU runtime's
// DeviceAllocator (core/device_runtime.h): tensors, gradients and op-table scratch.
#include <cstddef>

#include "core/device_runtime.h"
#include "core/free_lists.h"

namespace rf {

class CachingAllocator : public DeviceAllocator {
 public:
  // fresh_blocks: blocks obtained from the system (each one faults pages).
  using Stats = DeviceAllocator::Stats;

  CachingAllocator() = default;
  ~CachingAllocator() override;
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  void* allocate(size_t bytes) override;
  void release(void* p, size_t bytes) override;  // bytes as passed to allocate
  Stats stats() const override;
  void empty_cache() override;  // returns every cached block to the system

  static CachingAllocator& host();  // the process-wide CPU allocator
  static constexpr size_t kPopulateMinBytes = size_t{1} << 20;

 private:
  FreeLists lists_;
};

}  // namespace rf
