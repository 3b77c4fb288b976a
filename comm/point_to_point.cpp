// Point-to-point byte blobs (state transfer, docs/protocol.md recovery step 6): one message
// each, however large (UCX switches to zero-copy rendezvous by itself). The tag's chunk
// field holds the sender's rank, so blobs from two senders with the same (step, op) never
// mix; the receiver names the exact size and a different size is an error.
#include "comm/algorithms.h"

namespace rf::comm {

namespace {

class Send : public Collective {
 public:
  Send(int peer, const void* data, size_t bytes, OpId id, int rank)
      : Collective("send", id, 1), peer_(peer), data_(data), bytes_(bytes), rank_(rank) {}
  uint64_t bytes() const override { return bytes_; }
  bool point_to_point() const override { return true; }
  bool plan(int, uint64_t k, Round& r) override {
    if (k > 0) return false;
    r = Round{};
    r.chunk = static_cast<uint32_t>(rank_);  // the sender's rank: two senders never mix
    r.send_peer = peer_;
    r.send_data = data_;
    r.send_bytes = bytes_;
    return true;
  }

 private:
  int peer_;
  const void* data_;
  size_t bytes_;
  int rank_;
};

class Recv : public Collective {
 public:
  Recv(int peer, void* data, size_t bytes, OpId id) : Collective("recv", id, 1), peer_(peer), data_(data), bytes_(bytes) {}
  uint64_t bytes() const override { return bytes_; }
  bool point_to_point() const override { return true; }
  bool plan(int, uint64_t k, Round& r) override {
    if (k > 0) return false;
    r = Round{};
    r.chunk = static_cast<uint32_t>(peer_);
    r.recv_peer = peer_;
    r.recv_data = data_;
    r.recv_bytes = bytes_;
    r.exact_length = true;
    return true;
  }

 private:
  int peer_;
  void* data_;
  size_t bytes_;
};

}  // namespace

std::unique_ptr<Collective> make_send(int peer, const void* data, size_t bytes, OpId id, int rank) {
  return std::make_unique<Send>(peer, data, bytes, id, rank);
}
std::unique_ptr<Collective> make_recv(int peer, void* data, size_t bytes, OpId id) {
  return std::make_unique<Recv>(peer, data, bytes, id);
}

}  // namespace rf::comm
