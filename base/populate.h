#pragma once
// populate_pages — makes a large fresh allocation resident before it is used, in bounded
// slices; populate_pages_read — the same for a read-only mapping of another's memory.
//
// Why: a first touch of a 4 KiB page costs ~13 us on these VMs, one trap per page from user
// space. madvise(MADV_POPULATE_WRITE) (Linux 5.14+) has the kernel fault the pages in a
// loop instead: 800 MB in 0.41-0.55 s against 0.69-0.78 s touched (bench/RESULTS.md,
// "Recovery"). A replacement worker faults ~1.2 GB (parameters, momentum, gradient
// buckets, the staging buffer) in its start-up, which is on the recovery's critical path.
//
// Bounded: each madvise call holds the process's mmap lock while it faults, and a pending
// mmap() of another thread (the heartbeat thread's allocation) makes every later fault of
// every thread wait behind it. One call over 800 MB (0.4-2 s under load) stalled the
// heartbeat long enough for the coordinator to evict the rank as hung (D2). So the range
// is populated in calls of at most kPopulateSliceBytes (16 MiB: ~10 ms each here), and
// the lock is free between them.
//
// Contents are never changed: populating a page that is already resident does nothing, a
// fresh page reads as zero either way. Where madvise fails for a slice (an older kernel:
// EINVAL; no memory: ENOMEM), that slice is touched instead, one atomic `or 0` per page on
// a byte of the range — a write fault (one per page, no zero-page-then-copy), the bytes
// unchanged.
#include <cstddef>

namespace rf {

inline constexpr size_t kPopulateSliceBytes = size_t{16} << 20;

// The madvise the helper calls for each slice: (page-aligned address, length, advice),
// returning 0 or -1 with errno set, like ::madvise. Injected by tests.
using MadviseFn = int (*)(void* addr, size_t len, int advice);

struct PopulateStats {
  size_t calls = 0;          // madvise calls made
  size_t fallback_bytes = 0; // bytes of slices where madvise failed and pages were touched
};

// Makes every page that holds a byte of [data, data + bytes) resident and writable, in
// madvise calls of at most `slice` bytes (rounded down to whole pages, at least one).
// Best effort by design, never throws: a failed call costs the time the fault-in by
// touching takes. The range must be mapped, readable and writable, and no other thread
// may write it meanwhile (it is meant for memory just allocated).
PopulateStats populate_pages(void* data, size_t bytes, size_t slice = kPopulateSliceBytes,
                             MadviseFn advise = nullptr);

// The same for a range that may only be read (a peer's buffer mapped PROT_READ): the pages
// are mapped now, for reading, in madvise(MADV_POPULATE_READ) calls of at most `slice`
// bytes; where a call fails, one byte of each page of that slice is read instead. Nothing
// is written. For a shared file mapping (a memfd) the pages are the file's own, so a
// mapping of memory its owner made resident allocates nothing: it only makes the
// page-table entries. The range must be mapped and readable.
PopulateStats populate_pages_read(const void* data, size_t bytes, size_t slice = kPopulateSliceBytes,
                                  MadviseFn advise = nullptr);

}  // namespace rf
