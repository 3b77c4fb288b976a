#pragma once
// Buffer descriptions shared by every backend. comm knows nothing of tensors: a buffer is
// (pointer, count, dtype, device), and optionally the registered memory it lies in. The
// UCX backend takes host memory; device buffers are the NCCL backend's (docs/design.md,
// "Backends"), which also uses the opaque stream.
#include <cstddef>
#include <cstdint>
#include <functional>

#include "base/enum_names.h"

namespace rf::comm {

enum class DType : uint8_t { f32, f64, i64, u64 };
inline constexpr EnumName<DType> kDTypeNames[] = {
    {DType::f32, "float"}, {DType::f64, "double"}, {DType::i64, "int64"}, {DType::u64, "uint64"}};
static_assert(lists_each_once(kDTypeNames));
enum class Device : uint8_t { host, cuda };

size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "float", "double", "int64", "uint64" (nccl-tests words)

// Memory a backend can move without staging it: made by comm::allocate_registered
// (comm/communicator.h) and named by the Buffers that lie in it. Host memory is a
// SharedBuffer (comm/shm/shared_buffer.h: a memfd the peers on this host map, which the UCX
// backend all-reduces zero-copy). Each backend recognises the kinds it can use and treats
// any other as plain memory of its device. Registration belongs to no communicator: the
// memory outlives generations.
class RegisteredMemory {
 public:
  virtual ~RegisteredMemory() = default;
  virtual void* data() const = 0;
  virtual size_t bytes() const = 0;
  virtual Device device() const = 0;
  virtual int device_index() const { return 0; }
  // True when [p, p + n) lies inside [data(), data() + bytes()).
  bool contains(const void* p, size_t n) const;
};

struct Buffer {
  void* data = nullptr;
  size_t count = 0;
  DType dtype = DType::f32;
  Device device = Device::host;
  int device_index = 0;
  // The registered memory [data, data + bytes()) lies in, or null for plain memory. A
  // backend refuses (rf::InvalidInput) a buffer that is not inside the memory it names, or
  // on another device. It must outlive the collective, as the bytes do.
  const RegisteredMemory* registered = nullptr;
  size_t bytes() const { return count * dtype_size(dtype); }
};

// cudaStream_t for the NCCL backend; ignored (must be null) by UCX.
using Stream = void*;

// Which collective of the training step this is: the (step, op) of the tag.
struct OpId {
  uint64_t step = 0;
  uint32_t op = 0;
};

// The chunk hook (CommOptions::on_chunk): every backend calls it as an all-reduce makes
// progress, on the thread that drives the collective, with how many pieces of the
// all-reduce of (step, op) are done so far. Fault injection uses it ("after k chunks of the
// all-reduce of step s": kill, abort, drop). What a piece is depends on the algorithm (a
// ring round, a zero-copy phase); counts start at 1 and grow by 1.
struct ChunkEvent {
  uint64_t generation = 0;
  uint64_t step = 0;
  uint32_t op = 0;
  uint64_t chunks_done = 0;
};
using ChunkCallback = std::function<void(const ChunkEvent&)>;

// sum dst[i] = a[i] + b[i] for `count` elements (dst may alias a or b). Integer sums wrap.
void reduce_sum(DType t, void* dst, const void* a, const void* b, size_t count);

}  // namespace rf::comm
