#pragma once
// FreeLists — the caching logic shared by every allocator of the runtimes: freed blocks
// wait in a list keyed by their rounded size and the next request of that size takes one.
// CachingAllocator (host memory) and the CUDA runtime's device and pinned caches differ
// only in how they obtain and free a block. Thread-safe (one mutex).
//
//   size_t n = FreeLists::round(bytes);
//   void* p = lists.take(n);
//   if (!p) { p = obtain(n); lists.note_fresh(n); }
//   ...
//   lists.put(p, n);
#include <cstddef>
#include <map>
#include <mutex>
#include <vector>

#include "core/device_runtime.h"

namespace rf {

class FreeLists {
 public:
  using Stats = DeviceAllocator::Stats;

  // 64-byte granularity below 64 KiB, 4 KiB above: similar sizes share blocks without
  // wasting much, and big blocks stay page-aligned.
  static size_t round(size_t bytes);

  void* take(size_t n);          // a cached block of rounded size n, or nullptr
  void note_fresh(size_t n);     // a block of size n was obtained from the system
  void put(void* p, size_t n);   // p (of rounded size n) is free again
  Stats stats() const;

  // Hands every cached block to free_block(p), under the lock, and forgets them.
  template <typename FreeBlock>
  void drain(FreeBlock&& free_block) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [n, blocks] : free_)
      for (void* p : blocks) free_block(p);
    free_.clear();
    stats_.cached_bytes = 0;
  }

 private:
  mutable std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;
  Stats stats_;
};

}  // namespace rf
