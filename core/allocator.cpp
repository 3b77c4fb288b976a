#include "core/allocator.h"

#include <cstdlib>
#include <new>

#include "base/populate.h"

namespace rf {

CachingAllocator::~CachingAllocator() { empty_cache(); }

size_t CachingAllocator::round(size_t bytes) {
  // 64-byte granularity below 64 KiB, 4 KiB above: similar sizes share blocks without
  // wasting much, and big blocks stay page-aligned.
  const size_t g = bytes < (64u << 10) ? 64 : 4096;
  return bytes == 0 ? g : (bytes + g - 1) / g * g;
}

void* CachingAllocator::allocate(size_t bytes) {
  const size_t n = round(bytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(n);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      ++stats_.reused_blocks;
      stats_.cached_bytes -= n;
      stats_.live_bytes += n;
      return p;
    }
    ++stats_.fresh_blocks;
    stats_.live_bytes += n;
  }
  // aligned_alloc needs the size to be a multiple of the alignment (ASan enforces it).
  void* p = std::aligned_alloc(n % 4096 == 0 ? 4096 : 64, n);
  if (!p) throw std::bad_alloc();
  // A fresh big block is made resident now, by the kernel in bounded calls, instead of one
  // trap per page when the tensor is first written (a replacement's start-up faults its
  // parameters and momentum this way; base/populate.h). Outside the lock: it takes ~10 ms
  // per 16 MiB.
  if (n >= kPopulateMinBytes) populate_pages(p, n);
  return p;
}

void CachingAllocator::release(void* p, size_t bytes) {
  if (!p) return;
  const size_t n = round(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  free_[n].push_back(p);
  stats_.cached_bytes += n;
  stats_.live_bytes -= n;
}

CachingAllocator::Stats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [n, blocks] : free_)
    for (void* p : blocks) std::free(p);
  free_.clear();
  stats_.cached_bytes = 0;
}

CachingAllocator& CachingAllocator::host() {
  // Intentionally never destroyed (see header); reachable, so LeakSanitizer is quiet.
  // It does not touch process-wide malloc settings: that is the explicit opt-in
  // rf::tune_malloc_for_training() (core/malloc_tuning.h), called by training mains.
  static CachingAllocator* instance = new CachingAllocator();
  return *instance;
}

}  // namespace rf
