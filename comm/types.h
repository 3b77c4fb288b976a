#pragma once
// Buffer descriptions shared by every backend. comm knows nothing of tensors: a buffer is
// (pointer, count, dtype, device). The UCX backend takes host memory; device buffers are
// the NCCL backend's (DESIGN.md "Backends"), which also uses the opaque stream.
#include <cstddef>
#include <cstdint>

namespace rf::comm {

enum class DType : uint8_t { f32, f64, i64, u64 };
enum class Device : uint8_t { host, cuda };

size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "float", "double", "int64", "uint64" (nccl-tests words)

struct Buffer {
  void* data = nullptr;
  size_t count = 0;
  DType dtype = DType::f32;
  Device device = Device::host;
  int device_index = 0;
  size_t bytes() const { return count * dtype_size(dtype); }
};

// cudaStream_t for the NCCL backend; ignored (must be null) by UCX.
using Stream = void*;

// Which collective of the training step this is: the (step, op) of the tag.
struct OpId {
  uint64_t step = 0;
  uint32_t op = 0;
};

// sum dst[i] = a[i] + b[i] for `count` elements (dst may alias a or b). Integer sums wrap.
void reduce_sum(DType t, void* dst, const void* a, const void* b, size_t count);

}  // namespace rf::comm
