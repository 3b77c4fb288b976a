#pragma once
// Exec — what every op-table entry (kernels/op_table.h) runs with: the stream its work is
// ordered on and where it gets scratch memory. kernels knows nothing of tensors or of
// core's allocators: core hands its device's caching allocator in through Scratch.
//
// On the CPU the stream is null and an entry's work is done when it returns; on CUDA it
// is a cudaStream_t and an entry only enqueues (it never synchronises with the host).
#include <cstddef>

namespace rf::kernels {

using Stream = void*;

// Device memory for an entry's temporaries (the CPU's im2col columns, padded images). A
// caching allocator behind it keeps the step path free of system allocations.
class Scratch {
 public:
  virtual ~Scratch() = default;
  virtual void* get(size_t bytes) = 0;            // 64-byte aligned
  virtual void put(void* p, size_t bytes) = 0;    // bytes as passed to get
};

struct Exec {
  Stream stream = nullptr;
  Scratch* scratch = nullptr;  // never null inside an entry
};

// A scratch block for one entry's lifetime.
class ScratchBlock {
 public:
  ScratchBlock(Scratch& s, size_t bytes) : s_(s), bytes_(bytes), p_(bytes ? s.get(bytes) : nullptr) {}
  ~ScratchBlock() {
    if (p_) s_.put(p_, bytes_);
  }
  ScratchBlock(const ScratchBlock&) = delete;
  ScratchBlock& operator=(const ScratchBlock&) = delete;
  template <typename T = float>
  T* get() const { return static_cast<T*>(p_); }

 private:
  Scratch& s_;
  size_t bytes_;
  void* p_;
};

}  // namespace rf::kernels
