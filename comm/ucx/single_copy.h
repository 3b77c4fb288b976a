#pragma once
// Single-copy path for large messages between ranks on one host (what Open MPI's vader
// does with CMA). With endpoint error mode PEER, UCX 1.13 never uses CMA, so a large
// message is copied twice (sender -> shared-memory FIFO -> receiver); here the receiver
// copies once, straight from the sender's buffer, with process_vm_readv(2).
//
// Rendezvous of one transfer with tag T (ucx_transport.cpp runs it):
//   sender:   posts a receive for T|reply, then sends an Offer (pid, address, length, and
//             where its hold word is) tagged T. It does NOT finish the send, nor let anyone
//             touch the region, until the Done (tag T|reply) is in.
//   receiver: receives the Offer, reads the bytes, then reads the sender's hold word; only
//             if it still holds the token it sends Done and finishes the receive.
// Failure cases (docs/comm.md "Single-copy path"):
//   * sender dies (before or during the read): the read fails (ESRCH/EFAULT) -> the receive
//     fails naming the sender -> PeerFailed.
//   * receiver dies: no Done; the sender's wait fails through the normal peer-failure path
//     (endpoint error or a survivor's farewell).
//   * sender aborts/fails: it clears its hold word BEFORE failing any collective (so before
//     any caller can modify a buffer). A receiver whose check after the read does not see
//     the token fails too, so nobody completes with bytes read after the owner could have
//     modified them (R1/R4). The hold read is a second syscall after the data read: every
//     data load happened before it.
//   * receiver aborts: the read is synchronous on the driving thread, so it never runs
//     after the receive failed; the sender then waits in vain for Done and fails as above.
//   * ptrace restrictions (Yama, other uid, another host): probed at connect time by
//     reading each peer's hold word; a pair that cannot read uses the FIFO path (logged).
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace rf::comm {

struct SingleCopyOffer {
  static constexpr uint64_t kMagic = 0x72666f6666657231ull;  // "rfoffer1"
  uint64_t magic = kMagic;
  int64_t pid = 0;
  uint64_t address = 0;
  uint64_t bytes = 0;
  uint64_t hold_address = 0;  // the sender's hold word...
  uint64_t hold_token = 0;    // ...must still hold this after the read
};

struct SingleCopyDone {
  static constexpr uint64_t kMagic = 0x7266646f6e653031ull;  // "rfdone01"
  uint64_t magic = kMagic;
};

// Reads `bytes` from `address` in process `pid` into `dst`, looping over partial reads.
// Returns "" on success, else why not (errno text, or "short read").
std::string read_remote(pid_t pid, void* dst, uint64_t address, size_t bytes);

// A fresh random token (never 0: 0 means "released").
uint64_t make_hold_token();

}  // namespace rf::comm
