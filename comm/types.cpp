#include "comm/types.h"

#include <cstring>

#include "base/enforce.h"

namespace rf::comm {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: case DType::i64: case DType::u64: return 8;
  }
  RF_ENFORCE(false, "unknown dtype ", static_cast<int>(t));
  return 0;
}

const char* dtype_name(DType t) { return name_of(kDTypeNames, t); }

bool RegisteredMemory::contains(const void* p, size_t n) const {
  const auto a = reinterpret_cast<uintptr_t>(p), base = reinterpret_cast<uintptr_t>(data());
  const size_t size = bytes();
  return a >= base && a - base <= size && n <= size - (a - base);
}

namespace {
// Plain loops the compiler vectorises. The order of the operands is fixed by the caller
// (R4): float addition is commutative but not associative, so each algorithm decides the
// grouping once for every rank.
template <typename T>
void add(T* dst, const T* a, const T* b, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = a[i] + b[i];
}
}  // namespace

void reduce_sum(DType t, void* dst, const void* a, const void* b, size_t n) {
  switch (t) {
    case DType::f32: add(static_cast<float*>(dst), static_cast<const float*>(a), static_cast<const float*>(b), n); return;
    case DType::f64: add(static_cast<double*>(dst), static_cast<const double*>(a), static_cast<const double*>(b), n); return;
    // Signed overflow is undefined in C++: add int64 as uint64 (two's complement wrap).
    case DType::i64: case DType::u64:
      add(static_cast<uint64_t*>(dst), static_cast<const uint64_t*>(a), static_cast<const uint64_t*>(b), n); return;
  }
}

}  // namespace rf::comm
