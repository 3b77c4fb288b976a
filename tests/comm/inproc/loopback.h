#pragma once
// The in-process harness: W ranks as threads of one process, over a loopback Transport
// (comm/transport.h's contract, in memory), running the production collectives
// (comm/algorithms.h, advanced by Collective::advance as the communicators do).
//
//   Fabric fabric(4);
//   spawn(4, [&](int rank) {
//     auto c = make_allreduce_ring(buf, id, rank, 4, staging, 2, 64);
//     drive(*c, fabric.endpoint(rank), {.generation = 1});
//   });
//
// Test controls: Fabric::kill(rank) makes a rank's endpoints fail (every peer's transfers
// with it fail, as UCX's error mode PEER does), and a rank that simply stops calling
// drive() is a stalled rank. drive() does what a communicator's wait loop does around
// advance(): a dead member fails every collective of the generation, and no progress for
// `stall` fails it with TimedOut naming what it waits on (Collective::waiting_on).
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/collective.h"
#include "comm/transport.h"

namespace rf::comm::inproc {

class Fabric;

// One rank's view of the fabric: a Transport.
class LoopbackTransport final : public Transport {
 public:
  LoopbackTransport(Fabric& fabric, int rank) : fabric_(fabric), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override;
  void post_send(Transfer& t, int peer, const void* data, size_t bytes, uint64_t tag,
                 bool bulk = false) override;
  void post_recv(Transfer& t, int peer, void* data, size_t bytes, uint64_t tag, bool exact_length,
                 bool bulk = false) override;
  bool test(Transfer& t) override;
  void cancel(Transfer& t) override;
  unsigned progress() override { return 0; }
  int failure_count() const override;
  bool peer_failed(int peer, std::string* cause) const override;
  void shut_down_transfers() override;

 private:
  Fabric& fabric_;
  int rank_;
  bool shut_down_ = false;
};

class Fabric {
 public:
  explicit Fabric(int world);
  int world() const { return world_; }
  LoopbackTransport& endpoint(int rank) { return *endpoints_.at(rank); }
  // The rank's process is gone: its peers' transfers with it fail from now on.
  void kill(int rank);
  // Messages sent to `to` that no receive has taken (a stale generation's stay here).
  size_t unmatched(int to) const;

 private:
  friend class LoopbackTransport;
  struct Message {
    int from;
    uint64_t tag;
    std::vector<unsigned char> bytes;
  };
  int world_;
  mutable std::mutex mu_;
  std::vector<std::deque<Message>> inbox_;  // per receiving rank, in arrival order
  std::vector<bool> dead_;
  std::vector<std::unique_ptr<LoopbackTransport>> endpoints_;
};

struct DriveOptions {
  uint64_t generation = 1;
  int rank = 0;
  std::chrono::milliseconds stall{2000};  // no progress this long: TimedOut
};

// Advances c until it finishes. Throws PeerFailed (a transfer failed, or a member of the
// fabric died) or TimedOut (no progress for options.stall); either way the collective is
// quiesced first, so no buffer of it is touched afterwards.
void drive(Collective& c, Transport& t, const DriveOptions& options);

// Runs fn(rank) on W threads and joins them; the first exception of any rank is rethrown
// on the caller's thread, naming the rank. Every wait inside is bounded (drive's stall), so
// the join always ends.
void spawn(int world, const std::function<void(int rank)>& fn);

}  // namespace rf::comm::inproc
