#include "base/populate.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

namespace rf {

namespace {

int system_madvise(void* addr, size_t len, int advice) { return ::madvise(addr, len, advice); }

// One write fault per page of [a, e), the byte unchanged: a locked read-modify-write needs
// write access, so the first access of each page is a write (a plain read first would map
// the zero page and then copy it on the write). The byte touched lies in [lo, hi), the
// caller's range, never in a neighbour's bytes that share an edge page.
void touch_pages(uintptr_t a, uintptr_t e, uintptr_t page, uintptr_t lo, uintptr_t hi) {
  for (uintptr_t p = a; p < e; p += page)
    __atomic_fetch_or(reinterpret_cast<unsigned char*>(std::min(std::max(p, lo), hi - 1)), 0, __ATOMIC_RELAXED);
}

}  // namespace

PopulateStats populate_pages(void* data, size_t bytes, size_t slice, MadviseFn advise) {
  PopulateStats st;
  if (data == nullptr || bytes == 0) return st;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  // Every page holding a byte of the range: those pages are mapped (they hold the range),
  // and populating the parts outside it changes nothing there.
  const auto lo = reinterpret_cast<uintptr_t>(data);
  const uintptr_t hi = lo + bytes;
  const uintptr_t a = lo & ~(page - 1);
  const uintptr_t e = (hi + page - 1) & ~(page - 1);
  const uintptr_t step = std::max<uintptr_t>(page, slice & ~(page - 1));
#ifdef MADV_POPULATE_WRITE
  if (advise == nullptr) advise = system_madvise;
  for (uintptr_t s = a; s < e; s += step) {
    const uintptr_t n = std::min(step, e - s);
    ++st.calls;
    if (advise(reinterpret_cast<void*>(s), n, MADV_POPULATE_WRITE) != 0) {
      touch_pages(s, s + n, page, lo, hi);
      st.fallback_bytes += n;
    }
  }
#else
  (void)advise;
  (void)system_madvise;
  for (uintptr_t s = a; s < e; s += step) touch_pages(s, std::min(e, s + step), page, lo, hi);
  st.fallback_bytes = e - a;
#endif
  return st;
}

}  // namespace rf
