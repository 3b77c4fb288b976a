#pragma once
// ShmSession — the shared-memory side of one communicator (one generation): this rank's
// control segment, the peers' control segments mapped read-only, and a cache of the peers'
// registered buffers (comm/shm/shared_buffer.h) mapped read-only. The zero-copy all-reduce
// (allreduce_zero_copy.cpp) and the small all-reduce through slots (allreduce_shm_slots.cpp)
// synchronise only through the sequence words here, polled by the communicator's one wait
// loop, so abort, the stall timeout (D3) and peer death (D1) work as for messages.
//
// Single writer: every word and slot of a segment is written by its owner only; peers map
// it PROT_READ. So no rank can ever write another rank's memory, and a rank that dies
// leaves its segment and buffers frozen, still mapped by its peers: a memfd's pages live
// while any mapping holds them, so reading a dead peer's memory never faults (no SIGBUS).
//
// Generation fencing: the segment is a fresh memfd per communicator, its counters start
// at 0, and peers learn its fd only from this generation's connect messages (on this
// generation's new UCP worker). A rank therefore never observes a sequence word of another
// generation, and its own buffers are read only by peers that saw its words in this one.
//
// Mapping a peer's memfd opens /proc/<pid>/fd/<fd>: the kernel allows that exactly when it
// would allow process_vm_readv (ptrace read access). The connect step probes it (the peer's
// token must read back); a pair that cannot switches the whole communicator off this path.
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/shm/shm_mappings.h"

namespace rf::comm {

// One rank's control segment. Words written by the owner only; each on its own line.
struct ShmControl {
  static constexpr uint64_t kMagic = 0x726673686d303032ull;  // "rfshm002"
  // What a collective's (step, op) is published as: the message paths never match a peer
  // at another step or op (the tag), so these paths must not sum across them either.
  static uint64_t op_tag(uint64_t step, uint32_t op) { return step << 32 | op; }
  uint64_t magic = 0;
  uint64_t token = 0;        // random; peers check it when they attach
  uint64_t process = 0;      // process_token() of the owner (names its buffers' mappings)
  uint64_t generation = 0;
  uint64_t slot_bytes = 0;
  // The token while this rank's buffers may be read; 0 from the moment it fails or aborts
  // (before any of its collectives fails, so before its caller can touch a buffer).
  alignas(64) std::atomic<uint64_t> hold{0};
  // Zero-copy all-reduce number `seq` (1, 2, ...): entered = seq << 1 | registered, with
  // the buffer's place written first; reduced: this rank's segment is summed and it is done
  // reading the others' copies of it; done: it is done reading everyone's buffers.
  alignas(64) std::atomic<uint64_t> entered{0};
  uint64_t buf_id = 0, buf_fd = 0, buf_offset = 0, buf_bytes = 0, buf_file_bytes = 0, buf_tag = 0;
  alignas(64) std::atomic<uint64_t> reduced{0};
  alignas(64) std::atomic<uint64_t> done{0};
  // Small all-reduce number `seq` has its data in slot seq & 1 once slot_seq >= seq, and
  // its op_tag in slot_tag[seq & 1] (written before slot_seq, per slot: a peer one ahead
  // writes the other one).
  alignas(64) std::atomic<uint64_t> slot_seq{0};
  uint64_t slot_tag[2] = {0, 0};
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared words must be lock-free");

class ShmSession {
 public:
  // Creates this rank's segment (throws rf::Error when memfd is not available).
  ShmSession(int rank, int world, uint64_t generation, size_t slot_bytes);
  ~ShmSession();
  ShmSession(const ShmSession&) = delete;
  ShmSession& operator=(const ShmSession&) = delete;

  int fd() const { return fd_; }
  uint64_t token() const { return mine().token; }
  size_t slot_bytes() const { return slot_bytes_; }
  // Maps `peer`'s segment; "" on success, else why not (the connect-time probe).
  std::string attach(int peer, pid_t pid, int fd, uint64_t token);
  bool attached(int peer) const { return peers_[peer].ctrl != nullptr; }

  ShmControl& mine() const { return *mine_; }
  const ShmControl& peer(int p) const { return *peers_[p].ctrl; }
  unsigned char* my_slot(uint64_t seq) const { return slot_of(mine_, seq); }
  const unsigned char* slot(int p, uint64_t seq) const { return slot_of(p == rank_ ? mine_ : peers_[p].ctrl, seq); }
  // Still held by its owner (checked after reading its memory, behind an acquire fence).
  bool held(int p) const { return peers_[p].ctrl->hold.load(std::memory_order_relaxed) == peers_[p].token; }
  // Clears the hold word: readers of this rank's buffers fail from now on.
  void release() { mine_->hold.store(0, std::memory_order_seq_cst); }

  // `peer`'s registered buffer as it announced it for the current zero-copy all-reduce,
  // mapped read-only (shm_mappings.h: cached process-wide, so a survivor's buckets are
  // not mapped again in the next generation). Throws rf::Error naming the peer if it cannot.
  const unsigned char* peer_buffer(int peer);
  // Frees cached mappings of processes that are not this communicator's peers (dead or
  // departed ranks) and that no communicator uses any more.
  void forget_other_processes() const;

  uint64_t next_slot_seq() {
    slot_runs_.fetch_add(1, std::memory_order_relaxed);
    return ++slot_seq_;
  }
  uint64_t next_zero_copy_seq() { return ++zero_copy_seq_; }
  // Counts for tests and benchmarks: all-reduces through the slots, and zero-copy ones.
  void count_zero_copy() { zero_copy_runs_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t slot_runs() const { return slot_runs_.load(std::memory_order_relaxed); }
  uint64_t zero_copy_runs() const { return zero_copy_runs_.load(std::memory_order_relaxed); }

 private:
  struct Mapping {
    uint64_t id;
    std::shared_ptr<const PeerMapping> map;
  };
  struct Peer {
    ShmControl* ctrl = nullptr;  // mapped read-only
    pid_t pid = 0;
    uint64_t token = 0;
    uint64_t process = 0;
    std::vector<Mapping> buffers;  // the ones this communicator used (held while it lives)
  };
  unsigned char* slot_of(ShmControl* c, uint64_t seq) const {
    return reinterpret_cast<unsigned char*>(c) + slots_offset_ + (seq & 1) * slot_bytes_;
  }
  int rank_, world_;
  size_t slot_bytes_, slots_offset_, segment_bytes_;
  int fd_ = -1;
  ShmControl* mine_ = nullptr;
  std::vector<Peer> peers_;
  uint64_t slot_seq_ = 0, zero_copy_seq_ = 0;
  std::atomic<uint64_t> slot_runs_{0}, zero_copy_runs_{0};
};

}  // namespace rf::comm
