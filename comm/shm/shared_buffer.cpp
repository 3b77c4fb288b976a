#include "comm/shm/shared_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "base/error.h"
#include "base/populate.h"
#include "base/str.h"

namespace rf::comm {

namespace {

// SharedRange::id of the next shared buffer: unique for the process's lifetime, where fd
// numbers are reused (the peers' mapping cache is keyed by it, comm/shm/shm_mappings.h).
std::atomic<uint64_t> next_id{1};

size_t round_to_pages(size_t n) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (n + page - 1) / page * page;
}

}  // namespace

SharedBuffer::SharedBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  mapped_ = round_to_pages(bytes);
  fd_ = memfd_create("ringfence-buffer", MFD_CLOEXEC);
  if (fd_ >= 0 && ftruncate(fd_, static_cast<off_t>(mapped_)) != 0) {
    close(fd_);
    fd_ = -1;
  }
  if (fd_ >= 0) {
    // Every page is faulted in now (never inside a collective), by populate_pages: the
    // kernel in bounded 16 MiB calls. Not MAP_POPULATE: that populates the whole mapping
    // in one call holding the mmap lock, and another thread's mmap waits for all of it —
    // the heartbeat's too (base/populate.h). For a 400 MB memfd, MAP_POPULATE blocked
    // another thread's mmap for all of its duration (hundreds of ms); slices block it for
    // tens of ms at most (bench/recovery/memory_probe, bench/RESULTS.md). MADV_HUGEPAGE
    // only helps where shmem THP is in "advise" mode
    // (/sys/kernel/mm/transparent_hugepage/shmem_enabled); it is harmless elsewhere, so it
    // is asked for after the fact and its result ignored.
    void* p = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED) {
      close(fd_);
      fd_ = -1;
    } else {
      data_ = p;
      populate_pages(p, mapped_);
      (void)madvise(p, mapped_, MADV_HUGEPAGE);
    }
  }
  if (fd_ < 0) {
    // No memfd here: private memory, pre-touched the same way, not shared (the ordinary
    // paths).
    void* p = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw rf::Error(rf::str("SharedBuffer: cannot map ", bytes, " bytes: ", std::strerror(errno)));
    data_ = p;
    populate_pages(p, mapped_);
    return;
  }
  id_ = next_id.fetch_add(1, std::memory_order_relaxed);
}

SharedBuffer::~SharedBuffer() { release(); }

SharedBuffer::SharedBuffer(SharedBuffer&& o) noexcept
    : RegisteredMemory(), data_(o.data_), bytes_(o.bytes_), mapped_(o.mapped_), fd_(o.fd_), id_(o.id_) {
  o.data_ = nullptr;
  o.bytes_ = o.mapped_ = 0;
  o.fd_ = -1;
  o.id_ = 0;
}

SharedBuffer& SharedBuffer::operator=(SharedBuffer&& o) noexcept {
  if (this != &o) {
    release();
    data_ = o.data_;
    bytes_ = o.bytes_;
    mapped_ = o.mapped_;
    fd_ = o.fd_;
    id_ = o.id_;
    o.data_ = nullptr;
    o.bytes_ = o.mapped_ = 0;
    o.fd_ = -1;
    o.id_ = 0;
  }
  return *this;
}

void SharedBuffer::release() {
  if (data_ == nullptr) return;
  // Peers that mapped the memfd keep their pages until they unmap: our munmap/close
  // never pulls memory out from under a reader (no SIGBUS).
  munmap(data_, mapped_);
  if (fd_ >= 0) close(fd_);
  data_ = nullptr;
  bytes_ = mapped_ = 0;
  fd_ = -1;
  id_ = 0;
}

bool SharedBuffer::range_of(const void* data, size_t bytes, SharedRange* out) const {
  if (!shared() || !contains(data, bytes)) return false;
  const auto offset = reinterpret_cast<uintptr_t>(data) - reinterpret_cast<uintptr_t>(data_);
  if (out) *out = SharedRange{fd_, id_, offset, mapped_};
  return true;
}

}  // namespace rf::comm
