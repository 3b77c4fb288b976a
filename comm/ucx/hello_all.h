#pragma once
// HelloAll — the collective that connects a UCX communicator (UcxCommunicator's
// constructor runs it once, tagged with the internal op).
#include <cstdint>
#include <string>
#include <vector>

#include "comm/collective.h"
#include "comm/shm/shm_session.h"
#include "comm/tag.h"

namespace rf::comm {

// Every peer sends every other its identity once (rank, pid, where its hold word is and
// what it holds), so every endpoint is wired up (and a peer that dies later is seen by all,
// not only by its ring neighbours). Each rank then probes whether it can read each peer's
// memory (process_vm_readv of the hold word: same host, same uid, ptrace allowed) and a
// second pass tells every peer the answer, so both ends of a pair agree on the single-copy
// path (single_copy.h). Then 80 more passes of 8000-byte messages between the ranks of one
// host: the shared-memory FIFO between two ranks has 64 elements of ~8 KiB whose pages are
// only faulted in as messages first fill them (~13 us per 4 KiB page here, measured: the
// first ~100 ms of collectives ran 2-3x slower); that cost belongs to connecting, not to the
// first collectives. Ranks on other hosts share no FIFO and skip these passes.
class HelloAll : public Collective {
 public:
  static constexpr uint64_t kWarmPasses = 80;
  static constexpr size_t kWarmBytes = 8000;
  struct Identity {
    int64_t rank = -1;
    int64_t pid = 0;
    uint64_t hold_address = 0;
    uint64_t hold_token = 0;
    uint64_t single_copy_bytes = 0;  // 0: this rank does not use the single-copy path
    uint64_t single_copy_max_bytes = 0;  // its cap on the collective's size
    int64_t shm_fd = -1;                 // its shared-memory segment (-1: path off)
    uint64_t shm_token = 0;
    uint64_t host = 0;                   // host_identity_hash(): shared memory only within one host
  };
  // What pass 1 tells a peer about it (bits), and pass 2 everyone about this rank.
  static constexpr uint64_t kReadsSingleCopy = 1, kMapsShm = 2;
  // probe: this rank uses the single-copy path (me.single_copy_bytes > 0).
  HelloAll(int rank, int world, Identity me, bool probe, ShmSession* shm)
      : Collective("connect", OpId{0, StepTag::kInternalOp}, 1),
        rank_(rank),
        world_(world),
        probe_(probe),
        shm_(shm),
        me_(me),
        got_(world),
        can_read_(world, 0),
        peer_reads_me_(world, 0),
        shm_ok_in_(world, 0),
        warm_out_(kWarmBytes, 1),
        warm_in_(kWarmBytes, 0) {}
  uint64_t bytes() const override { return sizeof(Identity); }
  bool plan(int, uint64_t k, Round& r) override;
  void complete(int, uint64_t k, const Round& r) override;
  int64_t pid(int peer) const { return got_[peer].pid; }
  bool can_read(int peer) const { return (can_read_[peer] & kReadsSingleCopy) != 0; }
  bool peer_reads_me(int peer) const { return (peer_reads_me_[peer] & kReadsSingleCopy) != 0; }
  const std::string& probe_failure() const { return probe_failure_; }
  // Every rank maps every other (the shared-memory path is on for all, or for none).
  bool shm_all() const {
    if (shm_ == nullptr || shm_ok_out_ != 1) return false;
    for (int p = 0; p < world_; ++p) {
      if (p != rank_ && shm_ok_in_[p] != 1) return false;
    }
    return true;
  }
  const std::string& shm_failure() const { return shm_failure_; }

 private:
  int rank_, world_;
  bool probe_;
  ShmSession* shm_;
  Identity me_;
  std::vector<Identity> got_;
  std::vector<uint64_t> can_read_, peer_reads_me_, shm_ok_in_;
  uint64_t shm_ok_out_ = 0;
  std::string probe_failure_, shm_failure_;
  std::vector<char> warm_out_, warm_in_;
};

}  // namespace rf::comm
