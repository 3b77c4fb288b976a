#include "core/allocator.h"

#include <cstdlib>
#include <new>

#include "base/populate.h"

namespace rf {

CachingAllocator::~CachingAllocator() { empty_cache(); }

void* CachingAllocator::allocate(size_t bytes) {
  const size_t n = FreeLists::round(bytes);
  if (void* p = lists_.take(n)) return p;
  // aligned_alloc needs the size to be a multiple of the alignment (ASan enforces it).
  void* p = std::aligned_alloc(n % 4096 == 0 ? 4096 : 64, n);
  if (!p) throw std::bad_alloc();
  lists_.note_fresh(n);
  // A fresh big block is made resident now, by the kernel in bounded calls, instead of one
  // trap per page when the tensor is first written (a replacement's start-up faults its
  // parameters and momentum this way; base/populate.h). Outside the lock: it takes ~10 ms
  // per 16 MiB.
  if (n >= kPopulateMinBytes) populate_pages(p, n);
  return p;
}

void CachingAllocator::release(void* p, size_t bytes) {
  if (p) lists_.put(p, FreeLists::round(bytes));
}

CachingAllocator::Stats CachingAllocator::stats() const { return lists_.stats(); }

void CachingAllocator::empty_cache() {
  lists_.drain([](void* p) { std::free(p); });
}

CachingAllocator& CachingAllocator::host() {
  // Intentionally never destroyed (see header); reachable, so LeakSanitizer is quiet.
  // It does not touch process-wide malloc settings: that is the explicit opt-in
  // rf::tune_malloc_for_training() (core/malloc_tuning.h), called by training mains.
  static CachingAllocator* instance = new CachingAllocator();
  return *instance;
}

}  // namespace rf
