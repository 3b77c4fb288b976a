// Zero-copy all-reduce on registered buffers (comm/shm/shared_buffer.h) between ranks of one
// host, synchronised only through the sequence words of comm/shm/shm_session.h:
//
//   enter      publish where this rank's buffer is, then entered = seq << 1 | registered.
//              Wait until every rank entered seq. If any rank's buffer is not registered
//              (every rank sees the same bits), run the ordinary algorithm instead.
//   reduce     rank r owns segment r: it sums segment r of all W buffers, read straight
//              from the peers' mappings, in rank order 0..W-1, in cache-sized pieces, into
//              its own buffer. Then, if every peer still holds its buffer, reduced = seq.
//   gather     for each peer q with reduced >= seq: copy segment q from q's buffer into
//              ours (then check q still holds it).
//   done       done = seq; wait until every rank is done.
//
// Why it is safe (each rank writes only its own buffer):
// * nobody reads a buffer before its owner entered: every read waits for entered;
// * segment r of rank q's buffer is read by owner r only, during reduce; q overwrites it
//   only in gather, after r's `reduced`, which r publishes after its last read of it;
// * segment r of r's buffer is read by the others only in gather, after `reduced`, i.e.
//   after r wrote the final sum there; r writes nothing else into it;
// * a rank returns only after every peer's `done`: nobody reads its buffer any more, so
//   its caller may change it (the next bucket, the optimizer step).
// * R4: only the owner computes segment r, always as ((b0 + b1) + b2) + ..., and the others
//   copy it: every rank ends with the same bits, whoever computes.
// * a rank that fails or aborts clears its hold word before any of its collectives fails;
//   a reader checks the hold word after its reads (acquire fence between), so nobody
//   completes with bytes read after their owner could change them. A rank that dies
//   (SIGKILL) cannot change its memory any more; its pages stay mapped and readable; the
//   survivors fail through D1 (they wait for its words in vain).
// * every wait is a poll in the communicator's drive loop (abort, stall timeout, D1), and
//   the summing and copying are cut into slices of kSliceBytes per call so an abort is
//   seen within a fraction of a millisecond.
#include <atomic>
#include <cstring>

#include "base/str.h"
#include "comm/algorithms.h"
#include "comm/errors.h"
#include "comm/shm/shared_buffer.h"
#include "comm/shm/shm_session.h"

namespace rf::comm {

namespace {

constexpr size_t kSliceBytes = size_t{1} << 20;  // work per advance() call

class AllreduceZeroCopy : public Collective {
 public:
  AllreduceZeroCopy(Buffer buf, OpId id, int rank, int world, ShmSession& shm, const SharedRange* range,
                    std::unique_ptr<Collective> fallback, void* scratch, size_t scratch_bytes)
      : Collective("all-reduce", id, 1),
        buf_(buf),
        rank_(rank),
        world_(world),
        shm_(shm),
        registered_(range != nullptr),
        range_(range ? *range : SharedRange{}),
        fallback_(std::move(fallback)),
        scratch_(scratch),
        es_(dtype_size(buf.dtype)),
        piece_elems_(std::max<size_t>(1, scratch_bytes / dtype_size(buf.dtype))),
        src_(world, nullptr),
        gathered_(world, 0) {}

  uint64_t bytes() const override { return buf_.bytes(); }
  bool reports_chunks() const override { return true; }
  bool plan(int, uint64_t, Round&) override { return false; }  // never asked: advance() is ours
  void disable_single_copy() override { fallback_->disable_single_copy(); }
  bool quiesce(Transport& t) override { return !use_fallback_ || fallback_->quiesce(t); }
  bool needs_transport() const override { return use_fallback_; }
  int64_t last_chunk() const override { return use_fallback_ ? fallback_->last_chunk() : static_cast<int64_t>(phase_); }
  void waiting_on(int& peer, int64_t& chunk) const override {
    if (use_fallback_) return fallback_->waiting_on(peer, chunk);
    peer = waiting_peer_;
    chunk = phase_;  // the phase stands in for the chunk: 0 enter, 1 reduce, 2 gather, 3 done
  }

  bool advance(const Context& c, bool& progressed) override {
    if (use_fallback_) return fallback_->advance(c, progressed);
    switch (phase_) {
      case kEnter:
        if (!entered_) {
          enter();
          progressed = true;
        }
        if (!all_reached(&ShmControl::entered, 1)) return false;
        if (!choose(c)) return fallback_->advance(c, progressed);
        next_phase(c, kReduce);
        [[fallthrough]];
      case kReduce:
        if (!reduce_slice(c)) break;
        check_held_all(c, "reduce");
        shm_.mine().reduced.store(seq_, std::memory_order_release);
        next_phase(c, kGather);
        [[fallthrough]];
      case kGather: {
        bool worked = false;
        if (!gather_slice(c, worked)) {
          progressed = progressed || worked;
          return false;
        }
      }
        shm_.mine().done.store(seq_, std::memory_order_release);
        next_phase(c, kDone);
        [[fallthrough]];
      case kDone:
        if (!all_reached(&ShmControl::done, 0)) return false;
        return true;
    }
    progressed = true;  // a slice of work done
    return false;
  }

 private:
  enum Phase : int { kEnter = 0, kReduce = 1, kGather = 2, kDone = 3 };

  void enter() {
    seq_ = shm_.next_zero_copy_seq();
    ShmControl& me = shm_.mine();
    me.buf_id = range_.id;
    me.buf_fd = static_cast<uint64_t>(range_.fd);
    me.buf_offset = range_.offset;
    me.buf_bytes = buf_.bytes();
    me.buf_file_bytes = range_.file_bytes;
    me.buf_tag = ShmControl::op_tag(id().step, id().op);
    me.entered.store(seq_ << 1 | (registered_ ? 1 : 0), std::memory_order_release);
    entered_ = true;
  }

  // Whether every peer's word reached seq (shift: `entered` carries a flag bit). Polls
  // from the first peer not yet seen; a collective that waits is not progress.
  bool all_reached(std::atomic<uint64_t> ShmControl::*word, int shift) {
    for (; next_peer_ < world_; ++next_peer_) {
      if (next_peer_ == rank_) continue;
      if ((shm_.peer(next_peer_).*word).load(std::memory_order_acquire) >> shift < seq_) {
        waiting_peer_ = next_peer_;
        return false;
      }
    }
    waiting_peer_ = -1;
    next_peer_ = 0;
    return true;
  }

  // Every rank has entered: zero-copy if every buffer is registered (all ranks see the
  // same bits, so all decide alike), else the ordinary algorithm.
  bool choose(const Context& c) {
    bool all = registered_;
    const uint64_t tag = ShmControl::op_tag(id().step, id().op);
    for (int p = 0; p < world_; ++p) {
      if (p == rank_) continue;
      const uint64_t e = shm_.peer(p).entered.load(std::memory_order_acquire);
      if (e >> 1 != seq_) fail(c, p, rf::str("rank ", p, " is at zero-copy all-reduce ", e >> 1, ", this rank at ", seq_));
      // Its (step, op) too: a peer at another collective of the same size must fail us (the
      // ring would never match its messages), whichever way we go.
      const uint64_t t = shm_.peer(p).buf_tag;
      if (t != tag) {
        fail(c, p, rf::str("rank ", p, " is at all-reduce s=", t >> 32, " op=", t & 0xffffffffu,
                           " (every rank must start the same collectives in the same order)"));
      }
      all = all && (e & 1) != 0;
    }
    if (!all) {
      use_fallback_ = true;
      return false;
    }
    shm_.count_zero_copy();
    src_[rank_] = static_cast<const unsigned char*>(buf_.data);
    for (int p = 0; p < world_; ++p) {
      if (p == rank_) continue;
      if (shm_.peer(p).buf_bytes != buf_.bytes()) {
        fail(c, p, rf::str("rank ", p, " all-reduces ", shm_.peer(p).buf_bytes, " bytes, this rank ", buf_.bytes()));
      }
      try {
        src_[p] = shm_.peer_buffer(p);
      } catch (const rf::Error& e) {
        fail(c, p, e.what());
      }
    }
    const size_t base = buf_.count / world_, extra = buf_.count % world_;
    auto seg_begin = [&](int r) { return r * base + std::min<size_t>(r, extra); };
    seg_.resize(world_ + 1);
    for (int r = 0; r <= world_; ++r) seg_[r] = seg_begin(r);
    cursor_ = seg_[rank_];
    return true;
  }

  // Sums the next slice of our segment: ((b0 + b1) + b2) + ... in rank order (R4). With
  // more than two ranks the partial sums go through the cache-sized scratch, because our
  // own buffer is one of the inputs and must not be overwritten before it is read.
  bool reduce_slice(const Context& c) {
    const size_t end = seg_[rank_ + 1];
    const size_t slice_end = std::min(end, cursor_ + kSliceBytes / es_);
    auto* dst = static_cast<unsigned char*>(buf_.data);
    const DType t = buf_.dtype;
    while (cursor_ < slice_end) {
      if (aborting(c)) return false;
      const size_t n = std::min(piece_elems_, slice_end - cursor_);
      const size_t off = cursor_ * es_;
      if (world_ == 2) {
        reduce_sum(t, dst + off, src_[0] + off, src_[1] + off, n);  // dst aliases one input: element-wise, fine
      } else {
        reduce_sum(t, scratch_, src_[0] + off, src_[1] + off, n);
        for (int k = 2; k < world_ - 1; ++k) reduce_sum(t, scratch_, scratch_, src_[k] + off, n);
        reduce_sum(t, dst + off, scratch_, src_[world_ - 1] + off, n);
      }
      cursor_ += n;
    }
    return cursor_ >= end;
  }

  // Copies the owners' segments as they become ready, a slice per call. `worked`: bytes
  // were copied (waiting for an owner is not progress: the stall timeout must see it).
  bool gather_slice(const Context& c, bool& worked) {
    size_t budget = kSliceBytes;
    for (int i = 1; i < world_ && budget > 0; ++i) {
      const int q = (rank_ + i) % world_;  // start at different owners: spread the readers
      if (gathered_[q]) continue;
      if (gather_peer_ != q) {
        if (gather_peer_ >= 0) continue;  // finish the segment under way first
        if (shm_.peer(q).reduced.load(std::memory_order_acquire) < seq_) {
          waiting_peer_ = q;
          continue;
        }
        gather_peer_ = q;
        cursor_ = seg_[q];
      }
      const size_t end = seg_[q + 1];
      // Pieces of the scratch size, like the sums, so an abort is seen between pieces.
      while (cursor_ < end && budget > 0) {
        if (aborting(c)) return false;
        const size_t n = std::min({end - cursor_, (budget + es_ - 1) / es_, piece_elems_});
        std::memcpy(static_cast<unsigned char*>(buf_.data) + cursor_ * es_, src_[q] + cursor_ * es_, n * es_);
        cursor_ += n;
        budget -= std::min(budget, n * es_);
        worked = true;
      }
      if (cursor_ < end) return false;
      std::atomic_thread_fence(std::memory_order_acquire);  // every load of the copy before the hold check
      if (!shm_.held(q)) fail(c, q, rf::str("rank ", q, " released its buffer during the zero-copy read (it failed or aborted)"));
      gathered_[q] = 1;
      gather_peer_ = -1;
      ++gathered_count_;
      i = 0;  // look again from the start: an owner skipped above may be ready now
    }
    if (gathered_count_ == world_ - 1) {
      waiting_peer_ = -1;
      return true;
    }
    return false;
  }

  static bool aborting(const Context& c) { return c.abort && c.abort->load(std::memory_order_relaxed); }

  void check_held_all(const Context& c, const char* phase) {
    std::atomic_thread_fence(std::memory_order_acquire);  // every load of the sums before the checks
    for (int p = 0; p < world_; ++p) {
      if (p != rank_ && !shm_.held(p)) {
        fail(c, p, rf::str("rank ", p, " released its buffer during the zero-copy ", phase, " (it failed or aborted)"));
      }
    }
  }

  void next_phase(const Context& c, Phase ph) {
    phase_ = ph;
    next_peer_ = 0;
    if (c.on_chunk && *c.on_chunk) (*c.on_chunk)(ChunkEvent{c.generation, id().step, id().op, static_cast<uint64_t>(ph)});
  }

  [[noreturn]] void fail(const Context& c, int peer, const std::string& cause) const {
    fail_peer(c, peer, static_cast<int64_t>(phase_), cause);
  }

  Buffer buf_;
  int rank_, world_;
  ShmSession& shm_;
  bool registered_;
  SharedRange range_;
  std::unique_ptr<Collective> fallback_;
  void* scratch_;
  size_t es_, piece_elems_;
  std::vector<const unsigned char*> src_;  // every rank's buffer (ours and the mappings)
  std::vector<size_t> seg_;                 // segment r is [seg_[r], seg_[r+1]) elements
  uint64_t seq_ = 0;
  bool entered_ = false, use_fallback_ = false;
  Phase phase_ = kEnter;
  int next_peer_ = 0, waiting_peer_ = -1, gather_peer_ = -1, gathered_count_ = 0;
  std::vector<char> gathered_;  // [q]: owner q's segment is in
  size_t cursor_ = 0;
};

}  // namespace

std::unique_ptr<Collective> make_allreduce_zero_copy(Buffer buf, OpId id, int rank, int world, ShmSession& shm,
                                                     const SharedRange* range, std::unique_ptr<Collective> fallback,
                                                     void* scratch, size_t scratch_bytes) {
  return std::make_unique<AllreduceZeroCopy>(buf, id, rank, world, shm, range, std::move(fallback), scratch,
                                             scratch_bytes);
}

}  // namespace rf::comm
