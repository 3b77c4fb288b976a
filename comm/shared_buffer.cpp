#include "comm/shared_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

#include "base/error.h"
#include "base/populate.h"
#include "base/str.h"

namespace rf::comm {

namespace {

struct Entry {
  size_t bytes;
  int fd;
  uint64_t id;
  size_t mapped;
};

// The process-wide registry: base address -> entry. Small (one entry per bucket), looked up
// once per large all-reduce.
struct Registry {
  std::mutex mu;
  std::map<uintptr_t, Entry> by_address;
  uint64_t next_id = 1;
};
Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: buffers may outlive static teardown
  return *r;
}

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
    // the heartbeat's too (base/populate.h). For a 400 MB memfd (bench/RESULTS.md,
    // "Replacement start-up, session 4"): MAP_POPULATE blocked another thread's mmap for
    // 295-464 ms, all of its duration; slices blocked it at most 20-28 ms. MADV_HUGEPAGE
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
    // No memfd here: private memory, pre-touched the same way, not registered (the
    // ordinary paths).
    void* p = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw rf::Error(rf::str("SharedBuffer: cannot map ", bytes, " bytes: ", std::strerror(errno)));
    data_ = p;
    populate_pages(p, mapped_);
    return;
  }
  Registry& r = registry();
  std::lock_guard lk(r.mu);
  r.by_address[reinterpret_cast<uintptr_t>(data_)] = Entry{bytes_, fd_, r.next_id++, mapped_};
}

SharedBuffer::~SharedBuffer() { release(); }

SharedBuffer::SharedBuffer(SharedBuffer&& o) noexcept
    : data_(o.data_), bytes_(o.bytes_), mapped_(o.mapped_), fd_(o.fd_) {
  o.data_ = nullptr;
  o.bytes_ = o.mapped_ = 0;
  o.fd_ = -1;
}

SharedBuffer& SharedBuffer::operator=(SharedBuffer&& o) noexcept {
  if (this != &o) {
    release();
    data_ = o.data_;
    bytes_ = o.bytes_;
    mapped_ = o.mapped_;
    fd_ = o.fd_;
    o.data_ = nullptr;
    o.bytes_ = o.mapped_ = 0;
    o.fd_ = -1;
  }
  return *this;
}

void SharedBuffer::release() {
  if (data_ == nullptr) return;
  if (fd_ >= 0) {
    Registry& r = registry();
    std::lock_guard lk(r.mu);
    r.by_address.erase(reinterpret_cast<uintptr_t>(data_));
  }
  // Peers that mapped the memfd keep their pages until they unmap: our munmap/close
  // never pulls memory out from under a reader (no SIGBUS).
  munmap(data_, mapped_);
  if (fd_ >= 0) close(fd_);
  data_ = nullptr;
  bytes_ = mapped_ = 0;
  fd_ = -1;
}

bool find_shared(const void* data, size_t bytes, SharedRange* out) {
  const auto a = reinterpret_cast<uintptr_t>(data);
  Registry& r = registry();
  std::lock_guard lk(r.mu);
  auto it = r.by_address.upper_bound(a);
  if (it == r.by_address.begin()) return false;
  --it;
  const Entry& e = it->second;
  const uintptr_t base = it->first;
  if (a < base || a - base > e.bytes || bytes > e.bytes - (a - base)) return false;
  if (out) *out = SharedRange{e.fd, e.id, a - base, e.mapped};
  return true;
}

}  // namespace rf::comm
