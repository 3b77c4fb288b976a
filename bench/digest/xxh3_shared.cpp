// XXH3-128 through Debian's libxxhash.so (compiled apart from this file, so no inlining):
// its plain entry points, and its x86 dispatch ones, which pick SSE2/AVX2/AVX-512 at run time.
#include "bench/digest/xxh3_shared.h"

#define XXH_DISPATCH_DISABLE_REPLACE  // XXH3_128bits_update stays the plain entry point
#include <xxh_x86dispatch.h>
#include <xxhash.h>

namespace rf::bench {

uint64_t xxh3_shared(const void* data, size_t bytes) {
  XXH3_state_t* s = XXH3_createState();
  XXH3_128bits_reset(s);
  XXH3_128bits_update(s, data, bytes);
  const XXH128_hash_t h = XXH3_128bits_digest(s);
  XXH3_freeState(s);
  return h.low64 ^ h.high64;
}

uint64_t xxh3_shared_dispatch(const void* data, size_t bytes) {
  XXH3_state_t* s = XXH3_createState();
  XXH3_128bits_reset(s);
  XXH3_128bits_update_dispatch(s, data, bytes);
  const XXH128_hash_t h = XXH3_128bits_digest(s);
  XXH3_freeState(s);
  return h.low64 ^ h.high64;
}

}  // namespace rf::bench
