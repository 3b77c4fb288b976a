// Recursive doubling all-reduce for small buffers: log2 P rounds of "swap whole buffer
// with rank ^ 2^i and add", P the largest power of two <= W. The W - P extra ranks first
// hand their buffer to rank - P (fold in) and get the result back at the end (fold out).
//
// R4: in every exchange both partners compute (lower block) + (higher block), so both
// hold the same bits; the fold-out is a copy. Every rank ends with identical bytes.
#include <cstring>

#include "comm/algorithms.h"

namespace rf::comm {

namespace {

class AllreduceRecursiveDoubling : public Collective {
 public:
  AllreduceRecursiveDoubling(Buffer buf, OpId id, int rank, int world, void* staging)
      : Collective("all-reduce", id, 1), buf_(buf), rank_(rank), world_(world), staging_(staging) {
    pow2_ = 1;
    while (pow2_ * 2 <= world_) pow2_ *= 2;
    rounds_ = 0;
    while ((1 << rounds_) < pow2_) ++rounds_;
  }

  uint64_t bytes() const override { return buf_.bytes(); }
  // One message per round, latency-bound: the single-copy rendezvous (offer, read, done)
  // costs more than it saves here (64-128 KiB at W = 2: 21-27 us against 11-20 us).
  bool single_copy_ok() const override { return false; }
  bool reports_chunks() const override { return true; }

  // Round 0: fold in; rounds 1..log2 P: exchanges; round log2 P + 1: fold out.
  bool plan(int, uint64_t k, Round& r) override {
    if (world_ == 1 || k > static_cast<uint64_t>(rounds_) + 1) return false;
    r = Round{};
    r.chunk = static_cast<uint32_t>(k);
    const size_t n = buf_.bytes();
    const int extra = world_ - pow2_;
    if (k == 0) {
      if (rank_ >= pow2_) set_send(r, rank_ - pow2_, n);
      else if (rank_ < extra) set_recv(r, rank_ + pow2_, staging_, n);
    } else if (k <= static_cast<uint64_t>(rounds_)) {
      if (rank_ < pow2_) {
        const int partner = rank_ ^ (1 << (k - 1));
        set_send(r, partner, n);
        set_recv(r, partner, staging_, n);
      }
    } else {
      if (rank_ < extra) set_send(r, rank_ + pow2_, n);
      else if (rank_ >= pow2_) set_recv(r, rank_ - pow2_, buf_.data, n);
    }
    return true;
  }

  void complete(int, uint64_t k, const Round& r) override {
    if (r.recv_peer < 0 || r.recv_data != staging_) return;  // fold-out: received in place
    (void)k;
    // Lower-ranked block first, on both sides of the exchange.
    if (r.recv_peer < rank_) reduce_sum(buf_.dtype, buf_.data, staging_, buf_.data, buf_.count);
    else reduce_sum(buf_.dtype, buf_.data, buf_.data, staging_, buf_.count);
  }

 private:
  void set_send(Round& r, int peer, size_t n) {
    r.send_peer = peer;
    r.send_data = buf_.data;
    r.send_bytes = n;
  }
  static void set_recv(Round& r, int peer, void* to, size_t n) {
    r.recv_peer = peer;
    r.recv_data = to;
    r.recv_bytes = n;
  }
  Buffer buf_;
  int rank_, world_;
  void* staging_;
  int pow2_ = 1, rounds_ = 0;
};

}  // namespace

std::unique_ptr<Collective> make_allreduce_recursive_doubling(Buffer buf, OpId id, int rank, int world,
                                                              void* staging) {
  return std::make_unique<AllreduceRecursiveDoubling>(buf, id, rank, world, staging);
}

}  // namespace rf::comm
