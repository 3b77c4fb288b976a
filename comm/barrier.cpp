// Dissemination barrier: in round i every rank sends a one-byte token to rank + 2^i and
// waits for one from rank - 2^i. After ceil(log2 W) rounds each rank has (transitively)
// heard from every other, so nobody leaves before everybody arrived.
#include "comm/algorithms.h"

namespace rf::comm {

namespace {

class Barrier : public Collective {
 public:
  Barrier(OpId id, int rank, int world) : Collective("barrier", id, 1), rank_(rank), world_(world) {}
  uint64_t bytes() const override { return 0; }

  bool plan(int, uint64_t k, Round& r) override {
    if (k >= 31 || (uint64_t{1} << k) >= static_cast<uint64_t>(world_)) return false;
    const int d = 1 << k;
    r = Round{};
    r.chunk = static_cast<uint32_t>(k);
    r.send_peer = (rank_ + d) % world_;
    r.send_data = &token_out_;
    r.send_bytes = 1;
    r.recv_peer = ((rank_ - d) % world_ + world_) % world_;
    r.recv_data = &token_in_;
    r.recv_bytes = 1;
    return true;
  }

 private:
  int rank_, world_;
  char token_out_ = 1, token_in_ = 0;
};

}  // namespace

std::unique_ptr<Collective> make_barrier(OpId id, int rank, int world) {
  return std::make_unique<Barrier>(id, rank, world);
}

}  // namespace rf::comm
