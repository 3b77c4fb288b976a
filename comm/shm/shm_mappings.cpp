#include "comm/shm/shm_mappings.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "base/populate.h"
#include "base/str.h"
#include "comm/ucx/single_copy.h"

namespace rf::comm {

namespace {

struct Cache {
  std::mutex mu;
  uint64_t maps_made = 0;
  std::map<std::pair<uint64_t, uint64_t>, std::shared_ptr<const PeerMapping>> by_key;  // (process, id)
};
Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: communicators may outlive static teardown
  return *c;
}

}  // namespace

PeerMapping::~PeerMapping() { munmap(const_cast<unsigned char*>(base), bytes); }

uint64_t process_token() {
  static const uint64_t token = make_hold_token();
  return token;
}

const void* map_remote_fd(pid_t pid, int fd, size_t bytes, std::string* why) {
  const std::string path = rf::str("/proc/", pid, "/fd/", fd);
  const int local = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (local < 0) {
    *why = rf::str("open(", path, "): ", std::strerror(errno));
    return nullptr;
  }
  // Reading a shared mapping past its file's end raises SIGBUS, and mmap itself does not
  // check: the file must be as large as announced. It is not when the peer closed the fd
  // and reused its number for a smaller file before we opened it (test zc_refd).
  struct stat st {};
  if (fstat(local, &st) != 0) {
    *why = rf::str("fstat(", path, "): ", std::strerror(errno));
    close(local);
    return nullptr;
  }
  if (st.st_size < 0 || static_cast<uint64_t>(st.st_size) < bytes) {
    *why = rf::str(path, " is ", st.st_size, " bytes, not the announced ", bytes, " (closed and its fd reused?)");
    close(local);
    return nullptr;
  }
  void* p = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, local, 0);
  const int err = errno;
  close(local);  // the mapping keeps the memfd alive
  if (p == MAP_FAILED) {
    *why = rf::str("mmap(", path, ", ", bytes, " bytes): ", std::strerror(err));
    return nullptr;
  }
  // The page-table entries are made now, not by faults inside collectives — in bounded
  // calls (base/populate.h), not by MAP_POPULATE: that is one call over the whole mapping
  // holding the mmap lock, and another thread's mmap (the heartbeat's) waits for all of it.
  populate_pages_read(p, bytes);
  return p;
}

std::shared_ptr<const PeerMapping> map_peer_buffer(uint64_t process, pid_t pid, int fd, uint64_t id, size_t bytes,
                                                   const std::function<bool()>& still_held, std::string* why) {
  Cache& c = cache();
  {
    std::lock_guard lk(c.mu);
    auto it = c.by_key.find({process, id});
    if (it != c.by_key.end() && it->second->bytes == bytes) return it->second;
  }
  // Mapped outside the lock (slow); two racing communicators may both map, one wins.
  const void* p = map_remote_fd(pid, fd, bytes, why);
  if (!p) return nullptr;
  auto m = std::make_shared<const PeerMapping>(static_cast<const unsigned char*>(p), bytes);
  // The fd was opened above; if the owner still held the buffer after that, it named this
  // buffer (an owner frees a buffer only after its hold word is cleared). Otherwise it may
  // name another file: never cache that under this buffer's id.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!still_held()) {
    *why = "its owner released its buffer before it could be mapped (it failed or aborted)";
    return nullptr;
  }
  std::lock_guard lk(c.mu);
  ++c.maps_made;
  auto [it, inserted] = c.by_key.try_emplace({process, id}, m);
  if (!inserted && it->second->bytes != bytes) it->second = m;
  return it->second;
}

uint64_t peer_buffer_maps_made() {
  Cache& c = cache();
  std::lock_guard lk(c.mu);
  return c.maps_made;
}

void forget_other_processes(const std::vector<uint64_t>& live) {
  std::vector<std::shared_ptr<const PeerMapping>> dropped;  // unmapped outside the lock
  Cache& c = cache();
  std::lock_guard lk(c.mu);
  for (auto it = c.by_key.begin(); it != c.by_key.end();) {
    const bool is_live = std::find(live.begin(), live.end(), it->first.first) != live.end();
    if (!is_live && it->second.use_count() == 1) {
      dropped.push_back(std::move(it->second));
      it = c.by_key.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace rf::comm
