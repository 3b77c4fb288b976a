// Broadcast as a pipelined chain root -> root+1 -> ... -> root-1: round k receives piece k
// from the predecessor straight into the buffer and forwards piece k-1 to the successor,
// so for large buffers every link is busy at once (bandwidth ~ one link, not W-1).
#include <algorithm>

#include "comm/algorithms.h"
#include "comm/tag.h"

namespace rf::comm {

namespace {

class BroadcastChain : public Collective {
 public:
  BroadcastChain(Buffer buf, int root, OpId id, int rank, int world, size_t piece_bytes)
      : Collective("broadcast", id, 1), buf_(buf), world_(world) {
    pos_ = ((rank - root) % world + world) % world;
    next_ = (rank + 1) % world;
    prev_ = (rank - 1 + world) % world;
    const size_t n = buf.bytes();
    // One chunk number per piece: grow the pieces if the tag's field is too small.
    piece_ = std::max<size_t>(piece_bytes, (n + StepTag::kMaxChunk - 1) / StepTag::kMaxChunk);
    pieces_ = n == 0 ? 0 : (n + piece_ - 1) / piece_;
  }

  uint64_t bytes() const override { return buf_.bytes(); }

  bool plan(int, uint64_t k, Round& r) override {
    if (world_ == 1 || k > pieces_ || pieces_ == 0) return false;
    r = Round{};
    r.chunk = static_cast<uint32_t>(k);
    char* base = static_cast<char*>(buf_.data);
    if (pos_ > 0 && k < pieces_) {
      r.recv_peer = prev_;
      r.recv_data = base + k * piece_;
      r.recv_bytes = piece_len(k);
    }
    if (pos_ < world_ - 1 && k >= 1) {
      r.send_peer = next_;
      r.send_data = base + (k - 1) * piece_;
      r.send_bytes = piece_len(k - 1);
      r.send_chunk = static_cast<int64_t>(k - 1);  // piece k-1 travels with its own number
    }
    return true;
  }

 private:
  size_t piece_len(uint64_t k) const { return std::min(piece_, buf_.bytes() - k * piece_); }
  Buffer buf_;
  int world_, pos_, next_, prev_;
  size_t piece_, pieces_;
};

}  // namespace

std::unique_ptr<Collective> make_broadcast_chain(Buffer buf, int root, OpId id, int rank, int world,
                                                 size_t piece_bytes) {
  return std::make_unique<BroadcastChain>(buf, root, id, rank, world, piece_bytes);
}

}  // namespace rf::comm
