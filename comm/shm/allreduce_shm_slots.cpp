// Small all-reduce through shared slots (comm/shm/shm_session.h), for latency: one round, no
// message. All-reduce number `seq` of this communicator:
//
//   publish  copy our data into our slot seq & 1, then slot_seq = seq (release);
//   wait     until every peer's slot_seq >= seq (acquire);
//   sum      slot 0 + slot 1 + ... + slot W-1, in rank order, into the caller's buffer.
//
// R4: every rank computes the very same expression from the very same bytes, so all end
// with identical bits (no second round to share one rank's result). Each slot carries its
// (step, op), checked against ours: a peer at another collective fails us, never summed.
//
// Slot reuse needs no extra word: we write slot seq & 1 again only for seq + 2. To get
// there we completed seq + 1, which waited for every peer's slot_seq >= seq + 1; a peer
// publishes seq + 1 only after it returned from seq, i.e. after its last read of our slot
// for seq. And a peer never runs ahead by two for the same reason. A rank that fails never
// writes its slots again (the communicator is poisoned), so its slot holds what it
// published whatever its caller does; no hold check is needed here.
#include <cstring>

#include "base/str.h"
#include "comm/algorithms.h"
#include "comm/errors.h"
#include "comm/shm/shm_session.h"

namespace rf::comm {

namespace {

class AllreduceShmSlots : public Collective {
 public:
  AllreduceShmSlots(Buffer buf, OpId id, int rank, int world, ShmSession& shm)
      : Collective("all-reduce", id, 1),
        buf_(buf),
        rank_(rank),
        world_(world),
        shm_(shm),
        tag_(ShmControl::op_tag(id.step, id.op)) {}

  uint64_t bytes() const override { return buf_.bytes(); }
  bool reports_chunks() const override { return true; }
  bool plan(int, uint64_t, Round&) override { return false; }  // never asked: advance() is ours
  bool quiesce(Transport&) override { return true; }            // no transfer to cancel
  bool needs_transport() const override { return false; }
  int64_t last_chunk() const override { return published_ ? 0 : -1; }
  void waiting_on(int& peer, int64_t& chunk) const override {
    peer = next_peer_ < world_ ? next_peer_ : -1;
    chunk = 0;
  }

  bool advance(const Context& c, bool& progressed) override {
    if (!published_) {
      seq_ = shm_.next_slot_seq();
      std::memcpy(shm_.my_slot(seq_), buf_.data, buf_.bytes());
      shm_.mine().slot_tag[seq_ & 1] = tag_;
      shm_.mine().slot_seq.store(seq_, std::memory_order_release);
      published_ = true;
      progressed = true;
    }
    for (; next_peer_ < world_; ++next_peer_) {
      if (next_peer_ == rank_) continue;
      if (shm_.peer(next_peer_).slot_seq.load(std::memory_order_acquire) < seq_) return false;
      const uint64_t t = shm_.peer(next_peer_).slot_tag[seq_ & 1];
      if (t != tag_) fail(c, next_peer_, t);
      progressed = true;
    }
    const DType t = buf_.dtype;
    reduce_sum(t, buf_.data, shm_.slot(0, seq_), shm_.slot(1, seq_), buf_.count);
    for (int k = 2; k < world_; ++k) reduce_sum(t, buf_.data, buf_.data, shm_.slot(k, seq_), buf_.count);
    if (c.on_chunk && *c.on_chunk) (*c.on_chunk)(ChunkEvent{c.generation, id().step, id().op, 1});
    return true;
  }

 private:
  [[noreturn]] void fail(const Context& c, int peer, uint64_t tag) const {
    fail_peer(c, peer, 0,
              rf::str("rank ", peer, " is at all-reduce s=", tag >> 32, " op=", tag & 0xffffffffu,
                      " (every rank must start the same collectives in the same order)"));
  }

  Buffer buf_;
  int rank_, world_;
  ShmSession& shm_;
  uint64_t tag_;
  uint64_t seq_ = 0;
  bool published_ = false;
  int next_peer_ = 0;
};

}  // namespace

std::unique_ptr<Collective> make_allreduce_shm_slots(Buffer buf, OpId id, int rank, int world, ShmSession& shm) {
  return std::make_unique<AllreduceShmSlots>(buf, id, rank, world, shm);
}

}  // namespace rf::comm
