#include "core/malloc_tuning.h"

#include <malloc.h>

namespace rf {

bool tune_malloc_for_training() {
  // Never give the heap top back: a trimmed top is faulted again by the next step.
  const bool trim = mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1;
  // Chunks below 32 MB come from the heap (and so stay mapped when freed), not from a
  // fresh mmap that munmap returns on free.
  const bool mmap = mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1;
  return trim && mmap;
}

}  // namespace rf
