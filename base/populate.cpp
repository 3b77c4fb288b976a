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

// One read fault per page of [a, e): a volatile load of a byte inside [lo, hi).
void read_pages(uintptr_t a, uintptr_t e, uintptr_t page, uintptr_t lo, uintptr_t hi) {
  for (uintptr_t p = a; p < e; p += page)
    (void)*reinterpret_cast<const volatile unsigned char*>(std::min(std::max(p, lo), hi - 1));
}

// The advice, -1 where the system's headers predate them (Linux 5.14): faulted in instead.
#ifdef MADV_POPULATE_WRITE
constexpr int kPopulateWrite = MADV_POPULATE_WRITE, kPopulateRead = MADV_POPULATE_READ;
#else
constexpr int kPopulateWrite = -1, kPopulateRead = -1;
#endif

using FaultFn = void (*)(uintptr_t a, uintptr_t e, uintptr_t page, uintptr_t lo, uintptr_t hi);

// Every page holding a byte of [data, data + bytes), in calls of `advice` of at most one
// slice; `fault` for a slice whose call failed (or every slice, without the advice).
PopulateStats populate(const void* data, size_t bytes, size_t slice, MadviseFn advise, int advice, FaultFn fault) {
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
  if (advice < 0) {
    for (uintptr_t s = a; s < e; s += step) fault(s, std::min(e, s + step), page, lo, hi);
    st.fallback_bytes = e - a;
    return st;
  }
  if (advise == nullptr) advise = system_madvise;
  for (uintptr_t s = a; s < e; s += step) {
    const uintptr_t n = std::min(step, e - s);
    ++st.calls;
    if (advise(reinterpret_cast<void*>(s), n, advice) != 0) {
      fault(s, s + n, page, lo, hi);
      st.fallback_bytes += n;
    }
  }
  return st;
}

}  // namespace

PopulateStats populate_pages(void* data, size_t bytes, size_t slice, MadviseFn advise) {
  return populate(data, bytes, slice, advise, kPopulateWrite, touch_pages);
}

PopulateStats populate_pages_read(const void* data, size_t bytes, size_t slice, MadviseFn advise) {
  return populate(data, bytes, slice, advise, kPopulateRead, read_pages);
}

}  // namespace rf
