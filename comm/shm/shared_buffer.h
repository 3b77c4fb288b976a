#pragma once
// SharedBuffer — host memory that peers on this host can read directly, for the zero-copy
// all-reduce (docs/comm.md "Shared-memory path"): the host kind of RegisteredMemory
// (comm/types.h), which comm::allocate_registered(bytes) returns. Allocate gradient buckets
// (or any large all-reduce buffer) with it and name it in the Buffer (Buffer::registered);
// the UCX backend then lets peers read the range straight from its pages instead of
// copying it through the ring.
//
// * The memory is a memfd (memfd_create) mapped MAP_SHARED, made resident at allocation
//   (page faults are expensive: never in a collective) by rf::populate_pages in bounded
//   calls (base/populate.h: never one long call that stalls the heartbeat). Any range
//   inside it may be all-reduced (views, offsets); nothing is looked up by address.
// * Independent of any communicator: buckets outlive generations. Peers map it read-only
//   through /proc/<pid>/fd/<fd> when they first meet it and unmap it when their
//   communicator is destroyed; freeing a buffer while a collective uses it is a bug.
// * Where memfd is not available the buffer is ordinary private memory (shared() is false)
//   and all-reduces on it take the ordinary paths, registration or not. Nothing else
//   changes.
// * Every rank must pass a registered buffer to get the zero-copy path; a collective where
//   any rank's buffer is not registered runs the ring (agreed inside the collective).
//
// Thread safety: allocation and destruction of different buffers may run on any threads.
#include <cstddef>
#include <cstdint>

#include "comm/types.h"

namespace rf::comm {

// Where a range of a SharedBuffer lives, for the peers that map it (shm/ code).
struct SharedRange {
  int fd = -1;           // the memfd in this process (peers open /proc/<pid>/fd/<fd>)
  uint64_t id = 0;       // unique in this process for its lifetime (fds are reused)
  uint64_t offset = 0;   // of the range's first byte in the memfd
  uint64_t file_bytes = 0;  // mapped size of the memfd
};

class SharedBuffer final : public RegisteredMemory {
 public:
  SharedBuffer() = default;
  // `bytes` zero-filled bytes (may be 0: an empty buffer). Throws rf::Error if no memory.
  explicit SharedBuffer(size_t bytes);
  ~SharedBuffer();
  SharedBuffer(SharedBuffer&& o) noexcept;
  SharedBuffer& operator=(SharedBuffer&& o) noexcept;
  SharedBuffer(const SharedBuffer&) = delete;
  SharedBuffer& operator=(const SharedBuffer&) = delete;

  void* data() const override { return data_; }
  size_t bytes() const override { return bytes_; }
  Device device() const override { return Device::host; }
  template <typename T>
  T* as() const { return static_cast<T*>(data_); }
  // Peers can map it (memfd); false for the private-memory fallback.
  bool shared() const { return fd_ >= 0; }
  // True when this buffer is shared() and [data, data+bytes) lies inside it; fills *out
  // (when not null) with where the range lies in the memfd.
  bool range_of(const void* data, size_t bytes, SharedRange* out) const;

 private:
  void release();
  void* data_ = nullptr;
  size_t bytes_ = 0;
  size_t mapped_ = 0;  // bytes_ rounded up to whole pages
  int fd_ = -1;
  uint64_t id_ = 0;    // SharedRange::id, set when shared()
};

}  // namespace rf::comm
