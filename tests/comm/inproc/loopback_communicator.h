#pragma once
// The Communicator contract (comm/communicator.h) over the in-process fabric (loopback.h),
// so that W trainers run as threads of one test process. The collectives are the
// production ones (comm/algorithms.h); only the transport and the wait loop are the
// harness's.
//
//   LoopbackNetwork net;
//   spawn(3, [&](int rank) {
//     CommOptions o;
//     o.rank = rank, o.world = 3, o.generation = 1;
//     net.connect(o)->allreduce(buf, {step, 0});
//   });
//
// Threads. There is no progress thread: whichever thread calls in (a *_start, Work::test,
// Work::wait) drives the rank's queue under the driver lock, one thread at a time, and a
// waiter lets go of the lock between passes so another waiter (or abort()) gets it. A rank
// that nobody drives makes no progress, so a peer waiting on it counts that time against
// its stall timeout (D3): a trainer's compute between starting a bucket and waiting on it
// must stay below its peers' stall bound.
//
// Failures (the first poisons the communicator: every pending and future operation fails
// with it):
// * abort(reason): Aborted here; the peers fail with Aborted "...; relayed by rank r".
// * abort_failed(reason), a destroyed communicator with work pending: the peers fail with
//   PeerFailed naming rank r ("rank r aborted: reason; reported by rank r"). A stall (D3):
//   TimedOut here, naming what it waits on; the peers fail with PeerFailed naming that.
// * inject_drop() or LoopbackNetwork::kill*: the rank's endpoints fail (Fabric::kill); every
//   rank of the generation fails with PeerFailed naming it (D1), the rank itself too.
// What the peers are told goes through the generation's farewell board, as the UCX
// backend's farewell messages do: the first farewell of each rank stands.
#include <atomic>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/errors.h"
#include "tests/comm/inproc/loopback.h"

namespace rf::comm::inproc {

using CommunicatorFactory = std::function<std::shared_ptr<Communicator>(const CommOptions&)>;

// Every rank of a network uses the same values, so every rank picks the same algorithm.
struct LoopbackOptions {
  size_t small_allreduce_bytes = size_t{16} << 10;  // recursive doubling up to this, ring above
  size_t chunk_bytes = size_t{64} << 10;            // pieces of the ring and the broadcast chain
  int flows = 2;                                    // ring pieces in flight
};

// What a rank tells its peers when its communicator fails.
struct Farewell {
  enum class Kind : uint8_t { none, failed, aborted };
  Kind kind = Kind::none;
  int culprit = -1;   // failed: the rank to blame
  std::string cause;  // failed: why it failed; aborted: the abort reason
};

// What the ranks of one generation share: the fabric and the farewell board. Thread-safe.
class LoopbackGeneration {
 public:
  LoopbackGeneration(uint64_t generation, int world)
      : generation_(generation), fabric_(world), said_(world), connected_(world, false) {}
  uint64_t generation() const { return generation_; }
  Fabric& fabric() { return fabric_; }
  // Rank `from`'s farewell; only its first counts.
  void say(int from, Farewell f);
  // The farewell that fails `rank`'s communicator, if any peer said one: a named culprit
  // ("failed") wins over "aborted". Sets `from` to the rank that said it.
  bool heard(int rank, Farewell& f, int& from) const;

 private:
  friend class LoopbackNetwork;
  uint64_t generation_;
  Fabric fabric_;
  mutable std::mutex mu_;
  std::vector<Farewell> said_;
  std::atomic<int> said_count_{0};  // lets heard() skip the lock while nobody said any
  std::vector<bool> connected_;     // guarded by LoopbackNetwork::mu_
};

class LoopbackCommunicator final : public Communicator {
 public:
  // Made by LoopbackNetwork::connect.
  LoopbackCommunicator(std::shared_ptr<LoopbackGeneration> generation, const CommOptions& options,
                       const LoopbackOptions& loopback);
  // Work still pending fails (Aborted here; peers are told this rank failed).
  ~LoopbackCommunicator() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  uint64_t generation() const override { return gen_->generation(); }

  WorkPtr allreduce_start(Buffer buf, OpId id, Stream stream = nullptr) override;
  WorkPtr broadcast_start(Buffer buf, int root, OpId id, Stream stream = nullptr) override;
  WorkPtr allgather_start(Buffer in, Buffer out, OpId id, Stream stream = nullptr) override;
  WorkPtr barrier_start(OpId id) override;
  WorkPtr send_start(int peer, const void* data, size_t bytes, OpId id) override;
  WorkPtr recv_start(int peer, void* data, size_t bytes, OpId id) override;

  void abort(const std::string& reason) override { abort_with(reason, false); }
  void abort_failed(const std::string& reason) override { abort_with(reason, true); }
  bool aborted() const override { return abort_flag_.load(std::memory_order_acquire); }
  void inject_drop() override;
  void set_stall_timeout(Duration timeout) override;
  Duration stall_timeout() const override;

  class Pending;  // one started operation; its Work

 private:
  enum class Poison : uint8_t { peer, timeout, abort };
  enum class Step : uint8_t { running, finished, poisoned };
  static std::exception_ptr error_of(Poison kind, const CommErrorInfo& i);
  void validate(const Buffer& b, OpId id, Stream stream, const char* what) const;
  WorkPtr start(std::unique_ptr<Collective> c);
  // One pass under the driver lock without waiting for it; false when another thread drives.
  bool try_drive(bool* moved = nullptr);
  void wait_for(Pending& p, TimePoint deadline);
  // Driver only. True when anything moved (or the communicator failed).
  bool pump();
  bool poison_if_signalled(bool local_only);  // abort, drop, farewells, dead ranks
  Step advance_one(Pending& p, TimePoint now, bool& moved);
  void hand_back_finished();
  void abort_with(const std::string& reason, bool blame_self);
  void poison_aborted();
  // Fails everything pending with `kind`, quiesced first, and says farewell: an abort with
  // relay_reason sends "aborted" with it, anything else "failed" naming info.peer (this
  // rank when none, or when aborted as failed).
  void poison(Poison kind, CommErrorInfo info, const std::string* relay_reason = nullptr);

  std::shared_ptr<LoopbackGeneration> gen_;
  int rank_, world_;
  LoopbackOptions opt_;
  ChunkCallback on_chunk_;
  LoopbackTransport& transport_;
  std::vector<char> small_staging_, ring_staging_;  // used by the one running all-reduce

  // Lock order: driver_mu_, then queue_mu_, then abort_mu_ or the generation's locks.
  std::mutex driver_mu_;
  std::atomic<std::thread::id> driver_id_{};  // who holds driver_mu_ (the chunk hook's abort())
  bool poisoned_ = false;                     // driver only
  std::vector<std::shared_ptr<Pending>> active_;  // driver only: what a pass advances

  std::mutex queue_mu_;
  std::deque<std::shared_ptr<Pending>> queue_;  // started, not finished, in start order
  bool failed_ = false;                         // poisoned: new operations fail at once
  Poison poison_kind_ = Poison::peer;
  CommErrorInfo poison_info_;

  std::atomic<bool> abort_flag_{false};
  std::atomic<bool> drop_flag_{false};
  std::atomic<int64_t> stall_ns_{0};
  std::mutex abort_mu_;
  std::string abort_reason_;
  bool abort_blames_self_ = false;
};

// The fabrics of every generation, made by the first rank that connects to each.
// Thread-safe; communicators keep their generation alive after the network is gone.
class LoopbackNetwork {
 public:
  explicit LoopbackNetwork(LoopbackOptions options = {}) : opt_(options) {}
  // The communicator of rank o.rank of generation o.generation (world o.world). Honors
  // stall_timeout, on_chunk and, when o.store is set, connect_timeout: each rank publishes
  // "g<generation>/addr/<rank>" there and waits for every peer's (TimedOut naming the
  // missing one), as the UCX backend does. Ignores device, members, previous, regroup,
  // tag_key and the flight recorder. Throws rf::InvalidInput for bad options and
  // rf::EnforceError for a world that differs from the generation's or a rank connected
  // twice.
  std::shared_ptr<Communicator> connect(const CommOptions& o);
  // connect() as a factory; the network must outlive every call of it.
  CommunicatorFactory factory() {
    return [this](const CommOptions& o) { return connect(o); };
  }
  // The rank's process is gone: its endpoint of `generation` fails (a no-op for a
  // generation nobody connected to yet) ...
  void kill(uint64_t generation, int rank);
  // ... or of every generation made so far that has such a rank.
  void kill_everywhere(int rank);
  // The generation's shared state (null if nobody connected to it yet), for tests.
  std::shared_ptr<LoopbackGeneration> find(uint64_t generation) const;

 private:
  LoopbackOptions opt_;
  mutable std::mutex mu_;
  std::map<uint64_t, std::shared_ptr<LoopbackGeneration>> generations_;
};

}  // namespace rf::comm::inproc
