#pragma once
#include <cstddef>
#include <cstdint>

namespace rf::bench {
// XXH3-128 of `bytes` through libxxhash.so's streaming API (a fold of the two halves).
uint64_t xxh3_shared(const void* data, size_t bytes);
uint64_t xxh3_shared_dispatch(const void* data, size_t bytes);  // its run-time x86 dispatch
}  // namespace rf::bench
