#include "comm/ucx/single_copy.h"

#include <sys/uio.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "base/str.h"

namespace rf::comm {

std::string read_remote(pid_t pid, void* dst, uint64_t address, size_t bytes) {
  size_t done = 0;
  while (done < bytes) {
    iovec local{static_cast<char*>(dst) + done, bytes - done};
    iovec remote{reinterpret_cast<void*>(address + done), bytes - done};
    const ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return rf::str("process_vm_readv(pid ", pid, "): ", std::strerror(errno));
    }
    // A partial read means part of the range is not mapped (the peer is exiting).
    if (n == 0) return rf::str("process_vm_readv(pid ", pid, "): short read at byte ", done, " of ", bytes);
    done += static_cast<size_t>(n);
  }
  return "";
}

uint64_t make_hold_token() {
  std::random_device rd;
  uint64_t t = 0;
  while (t == 0) t = (uint64_t{rd()} << 32) ^ rd();
  return t;
}

}  // namespace rf::comm
