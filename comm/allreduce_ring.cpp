// Ring all-reduce: reduce-scatter then all-gather over W segments (ring_layout.h), each
// segment cut in pieces that travel independently, `flows` pieces in flight at a time so
// one piece's reduction overlaps the next piece's transfer (Gloo's `ring`, NCCL's runRing).
//
// R4: only the owner of a segment ever computes its final sum (a fixed chain of additions
// round the ring); the all-gather phase receives those bytes straight into the buffer and
// never re-reduces, so every rank ends with bitwise identical bytes.
#include <cstring>

#include "base/error.h"
#include "base/str.h"
#include "comm/algorithms.h"
#include "comm/ring_layout.h"
#include "comm/tag.h"

namespace rf::comm {

namespace {

class AllreduceRing : public Collective {
 public:
  AllreduceRing(Buffer buf, OpId id, int rank, int world, void* staging, int flows, size_t piece_elems)
      : Collective("all-reduce", id, flows),
        buf_(buf),
        elem_(dtype_size(buf.dtype)),
        rank_(rank),
        world_(world),
        flows_(flows),
        staging_(static_cast<char*>(staging)),
        piece_bytes_(piece_elems * elem_),
        layout_(buf.count, world, piece_elems),
        steps_(2 * static_cast<uint64_t>(world - 1)) {}

  uint64_t bytes() const override { return buf_.bytes(); }
  bool reports_chunks() const override { return true; }

  bool plan(int flow, uint64_t k, Round& r) override {
    if (world_ == 1) return false;
    const uint64_t p = static_cast<uint64_t>(flow) + (k / steps_) * static_cast<uint64_t>(flows_);
    if (p >= layout_.pieces) return false;
    const int j = static_cast<int>(k % steps_);
    char* base = static_cast<char*>(buf_.data);
    const int right = layout_.mod(rank_ + 1), left = layout_.mod(rank_ - 1);
    r = Round{};
    r.chunk = static_cast<uint32_t>(p * steps_ + static_cast<uint64_t>(j));
    Span send, recv;
    if (j < world_ - 1) {  // reduce-scatter: receive into staging, add in complete()
      send = layout_.piece(layout_.rs_send_segment(rank_, j), p);
      recv = layout_.piece(layout_.rs_recv_segment(rank_, j), p);
      r.recv_data = staging_ + static_cast<size_t>(flow) * piece_bytes_;
    } else {  // all-gather: the owner's final bytes land in place (copy, R4)
      const int a = j - (world_ - 1);
      send = layout_.piece(layout_.ag_send_segment(rank_, a), p);
      recv = layout_.piece(layout_.ag_recv_segment(rank_, a), p);
      r.recv_data = base + recv.offset * elem_;
    }
    r.send_peer = right;
    r.send_data = base + send.offset * elem_;
    r.send_bytes = send.count * elem_;
    r.recv_peer = left;
    r.recv_bytes = recv.count * elem_;
    recv_offset_[flow] = recv.offset;
    recv_count_[flow] = recv.count;
    return true;
  }

  void complete(int flow, uint64_t k, const Round& r) override {
    if (static_cast<int>(k % steps_) >= world_ - 1 || recv_count_[flow] == 0) return;
    char* own = static_cast<char*>(buf_.data) + recv_offset_[flow] * elem_;
    // Incoming partial sum first, then our value: the same chain for every element.
    reduce_sum(buf_.dtype, own, r.recv_data, own, recv_count_[flow]);
  }

 private:
  Buffer buf_;
  size_t elem_;
  int rank_, world_, flows_;
  char* staging_;
  size_t piece_bytes_;
  RingLayout layout_;
  uint64_t steps_;
  size_t recv_offset_[kMaxFlows] = {};
  size_t recv_count_[kMaxFlows] = {};
};

}  // namespace

std::unique_ptr<Collective> make_allreduce_ring(Buffer buf, OpId id, int rank, int world, void* staging,
                                                int flows, size_t piece_bytes) {
  const size_t elem = dtype_size(buf.dtype);
  size_t piece_elems = std::max<size_t>(1, piece_bytes / elem);
  // Every message needs its own chunk number: pieces x 2(W-1) must fit the tag's field.
  const RingLayout probe(buf.count, world, piece_elems);
  const uint64_t steps = 2 * static_cast<uint64_t>(std::max(world - 1, 1));
  if (probe.pieces * steps > uint64_t{StepTag::kMaxChunk} + 1) {
    throw rf::InvalidInput(rf::str("all-reduce of ", buf.bytes(), " bytes over ", world, " ranks needs ",
                                   probe.pieces * steps, " chunks; raise chunk_bytes (now ", piece_bytes,
                                   ") so that it needs at most ", StepTag::kMaxChunk + 1));
  }
  return std::make_unique<AllreduceRing>(buf, id, rank, world, staging, flows, piece_elems);
}

}  // namespace rf::comm
