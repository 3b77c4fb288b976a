#pragma once
// Collective — one collective as a small state machine the driving thread advances
// without blocking. A collective is `flows` independent sequences of rounds; a round is
// at most one send and one receive (posted together, receive first) followed by a local
// step (reduce or nothing) once both finished. Flows are how the ring pipelines: while
// flow 0 reduces piece p, flow 1's piece p+1 is on the wire.
//
// Algorithms (allreduce_ring.cpp, allreduce_recursive_doubling.cpp, broadcast.cpp,
// allgather_ring.cpp, barrier.cpp, point_to_point.cpp) only say which round comes next;
// advance() in collective.cpp does the posting, polling and bookkeeping for all of them.
#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include "comm/transport.h"
#include "comm/types.h"

namespace rf::comm {

struct Round {
  int send_peer = -1;  // -1: no send this round
  const void* send_data = nullptr;
  size_t send_bytes = 0;
  int recv_peer = -1;  // -1: no receive this round
  void* recv_data = nullptr;
  size_t recv_bytes = 0;
  uint32_t chunk = 0;       // the tag's chunk field of the receive (and of the send...)
  int64_t send_chunk = -1;  // ...unless set: a pipelined chain forwards an older piece
  bool exact_length = false;  // the receive must get exactly recv_bytes (blobs)
};

class Collective {
 public:
  static constexpr int kMaxFlows = 4;
  Collective(const char* name, OpId id, int flows);
  virtual ~Collective() = default;

  // Fills round k of `flow`; returns false when the flow has no more rounds.
  virtual bool plan(int flow, uint64_t k, Round& r) = 0;
  // Both transfers of round k finished: reduce or copy.
  virtual void complete(int /*flow*/, uint64_t /*k*/, const Round& /*r*/) {}
  virtual uint64_t bytes() const = 0;
  virtual bool reports_chunks() const { return false; }
  // Point-to-point transfers run alongside everything else (a ring of recv + send pairs
  // would deadlock if they ran one after the other); collectives run in start order.
  virtual bool point_to_point() const { return false; }
  // May its messages take the transport's single-copy path (ucx/single_copy.h)? Needs both
  // sides to agree on every message's size, which collectives do by construction (blobs
  // do not). Latency-bound algorithms say no: the rendezvous adds a round trip.
  virtual bool single_copy_ok() const { return !point_to_point(); }
  // Whether its progress depends on the transport's: false for the shared-memory
  // collectives (they poll shared words), so the wait loop may drive UCX less often then.
  virtual bool needs_transport() const { return true; }

  // The communicator's size cap on the single-copy path (UcxOptions::single_copy_max_bytes).
  virtual void disable_single_copy() { single_copy_off_ = true; }

  const char* name() const { return name_; }
  OpId id() const { return id_; }

  struct Context {
    Transport* transport = nullptr;
    uint64_t generation = 0;
    int rank = 0;
    const ChunkCallback* on_chunk = nullptr;
    // The communicator's abort flag: long local work (the zero-copy sums) stops early when
    // it is set, so the driver reaches the check in pump() within one piece.
    const std::atomic<bool>* abort = nullptr;
  };
  // Posts and polls; returns true when every flow finished. Sets `progressed` when a
  // transfer finished. Throws PeerFailed when a transfer failed.
  // Virtual (with the three below) for collectives that are not rounds of messages: the
  // shared-memory all-reduces poll sequence words instead (allreduce_zero_copy.cpp).
  virtual bool advance(const Context& c, bool& progressed);
  // What it waits on now (for stall errors and the flight recorder).
  virtual void waiting_on(int& peer, int64_t& chunk) const;
  // After a failure: cancels pending receives and polls; true once nothing is pending, so
  // no buffer of this collective is touched any more.
  virtual bool quiesce(Transport& t);
  // Test hook (generation fencing): tag this collective's messages with generation g.
  void override_generation(uint64_t g) { generation_override_ = static_cast<int64_t>(g); }
  // The last chunk that made progress (for the flight recorder of a finished collective).
  virtual int64_t last_chunk() const { return last_chunk_; }

 protected:
  // Throws PeerFailed for this collective (its name, tag and generation) at `chunk`,
  // naming `peer` and the cause.
  [[noreturn]] void fail_peer(const Context& c, int peer, int64_t chunk, std::string cause) const;

 private:
  struct Flow {
    uint64_t k = 0;
    bool in_round = false;
    bool finished = false;
    Round round;
    Transfer send, recv;
  };
  void post(const Context& c, Flow& f);
  const char* name_;
  OpId id_;
  int nflows_;
  std::array<Flow, kMaxFlows> flows_;
  uint64_t chunks_done_ = 0;
  int64_t last_chunk_ = -1;
  int64_t generation_override_ = -1;
  bool single_copy_off_ = false;
};

}  // namespace rf::comm
