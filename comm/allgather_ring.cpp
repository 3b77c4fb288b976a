// Ring all-gather: W-1 rounds; in round k rank r forwards block (r-k) to r+1 and receives
// block (r-k-1) from r-1 straight into the output. Blocks are copies, so every rank ends
// with the same bytes.
#include <cstring>

#include "comm/algorithms.h"

namespace rf::comm {

namespace {

class AllgatherRing : public Collective {
 public:
  AllgatherRing(Buffer in, Buffer out, OpId id, int rank, int world)
      : Collective("all-gather", id, 1), in_(in), out_(out), rank_(rank), world_(world) {}

  uint64_t bytes() const override { return in_.bytes(); }

  bool plan(int, uint64_t k, Round& r) override {
    const size_t block = in_.bytes();
    char* out = static_cast<char*>(out_.data);
    if (k == 0 && block > 0 && out + rank_ * block != in_.data) {
      std::memmove(out + rank_ * block, in_.data, block);
    }
    if (k >= static_cast<uint64_t>(world_ - 1)) return false;
    const int kk = static_cast<int>(k);
    r = Round{};
    r.chunk = static_cast<uint32_t>(k);
    r.send_peer = (rank_ + 1) % world_;
    r.send_data = out + static_cast<size_t>(mod(rank_ - kk)) * block;
    r.send_bytes = block;
    r.recv_peer = mod(rank_ - 1);
    r.recv_data = out + static_cast<size_t>(mod(rank_ - kk - 1)) * block;
    r.recv_bytes = block;
    return true;
  }

 private:
  int mod(int x) const { return ((x % world_) + world_) % world_; }
  Buffer in_, out_;
  int rank_, world_;
};

}  // namespace

std::unique_ptr<Collective> make_allgather_ring(Buffer in, Buffer out, OpId id, int rank, int world) {
  return std::make_unique<AllgatherRing>(in, out, id, rank, world);
}

}  // namespace rf::comm
