#pragma once
// UcxCommunicator — the Communicator of one generation on UCX (host memory).
//
// Threads. One progress thread per communicator drives the UCX worker while collectives
// are outstanding and nobody waits for them (so gradient buckets move during backward).
// A thread that waits on a Work takes the driver lock from it and drives itself: no
// hand-off through a sleeping thread on the fast path, which is what keeps a small
// all-reduce near one network round trip. Either way exactly one thread touches UCX at a
// time (the driver lock), and both run the same loop, drive(), which is the ONE place that
// checks the abort flag, the stall timeout (D3) and failed peers (D1).
//
// A driver lets go of the driver lock while it yields or naps; abort() sets its flag and,
// if it finds the lock free, runs one round itself, so a revoked generation fails at once
// even when the waiting thread is not scheduled. inject_drop() only sets a flag.
//
// Lock order: driver_mu_ before queue_mu_ (and before abort_mu_ and the recorder's).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/enum_names.h"
#include "comm/bootstrap/bootstrap_store.h"
#include "comm/collective.h"
#include "comm/communicator.h"
#include "comm/errors.h"
#include "comm/flight_recorder.h"
#include "comm/transport.h"
#include "comm/ucx/hello_all.h"
#include "comm/ucx/ucx_context.h"

namespace rf::comm {

class UcxTransport;
class ShmSession;

struct UcxOptions {
  std::chrono::milliseconds stall_timeout{30000};     // D3 at first; set_stall_timeout() changes it
  std::chrono::milliseconds connect_timeout{30000};   // waiting for peers' addresses
  std::chrono::milliseconds teardown_timeout{2000};   // flushing endpoints when destroyed
  // Ring pipelining: pieces of chunk_bytes, `flows` pieces in flight (bench/RESULTS.md).
  // 256 KiB since the single-copy path: each piece costs a rendezvous (offer, done), and
  // 256-512 KiB beat 128 KiB at 1-16 MiB in interleaved runs (FIFO path: no difference).
  size_t chunk_bytes = size_t{256} << 10;
  int flows = 2;
  // All-reduces up to this many bytes use recursive doubling, larger ones the ring.
  // -1 = auto, from a comm_bench --small-bytes sweep on 2 cores:
  // 128 KiB for W <= 4 (recursive doubling as fast or faster up to 128 KiB at W = 2 and 4:
  // log2 W rounds instead of 2(W-1) matter more than its extra bytes, log2(W) x N against
  // 2N(W-1)/W, while ranks share cores), 16 KiB above (W = 8: even at 16 KiB, ring wins
  // from 64 KiB).
  int64_t small_allreduce_bytes = -1;
  // Back-off of the wait loop when nothing happens: spin this many rounds, then yield the
  // core this many rounds, then nap 50 us per round (comm_bench --idle-spins).
  // -1 = auto: 8 spins while the ranks fit the machine's hardware threads, 0 when they
  // outnumber them (then every spin steals the core from the peer we wait for). On a
  // cluster, where W counts ranks of every host, set it yourself (8 is a good start).
  int idle_spins = -1;
  unsigned idle_yields = 4096;
  // Single-copy path (ucx/single_copy.h): collective messages of at least
  // single_copy_bytes between ranks on this host are read by the receiver straight from
  // the sender's buffer (process_vm_readv), one copy instead of UCX's two. Used with each
  // peer whose memory the connect-time probe could read (else the FIFO path, logged
  // once). Every rank must use the same values.
  bool single_copy = true;
  size_t single_copy_bytes = size_t{32} << 10;
  // ...and only in collectives whose buffer (Collective::bytes()) is at most this large.
  // -1 = auto: 8 MiB while the ranks fit the machine's hardware threads, no cap when they
  // outnumber them. With a core per rank, UCX's FIFO splits the copying between sender
  // (copy-in) and receiver (copy-out), running in parallel, while a single-copy receiver
  // does all of it; once the buffers spill the cache that parallel split wins (at W = 2
  // on 2 cores the two paths are level at 8 MiB, single-copy 0.8-0.9x from 16 MiB). With
  // more ranks than cores there is no parallelism to split into, and one copy instead of
  // two keeps winning. Every rank must resolve the same value (checked at connect).
  int64_t single_copy_max_bytes = -1;
  // Shared-memory path (comm/shm/shm_session.h), used when every pair of ranks can map each
  // other's memory (same host; probed when connecting, else off for the whole communicator,
  // logged once): all-reduces of at most shm_slot_bytes go through shared slots (one round,
  // no message); larger ones on buffers every rank registered (Buffer::registered naming a
  // SharedBuffer, comm/shm/shared_buffer.h) are zero-copy: each rank sums its segment straight
  // from the peers' buffers. Larger ones on unregistered buffers keep the algorithms above. Every rank must use the same values.
  bool shm = true;
  size_t shm_slot_bytes = 4096;
  size_t flight_records = 256;
  std::string flight_recorder_path;  // JSON lines appended here on failure; "" = stderr
  ChunkCallback on_chunk;            // the chunk hook (comm/types.h), called on the driving thread
  TagKey tag_key;                    // keys every tag on the wire (comm/tag.h); off by default
};

// Why a communicator fails everything pending: a peer (or a transfer with it) failed, a
// collective made no progress within the stall bound, or it was aborted. Each fails the
// collectives with its own error type (PeerFailed, TimedOut, Aborted).
enum class PoisonKind : uint8_t { peer, timeout, abort };
inline constexpr EnumName<PoisonKind> kPoisonKindNames[] = {
    {PoisonKind::peer, "peer"}, {PoisonKind::timeout, "timeout"}, {PoisonKind::abort, "abort"}};
static_assert(lists_each_once(kPoisonKindNames));
const char* to_string(PoisonKind kind);

class UcxCommunicator : public Communicator {
 public:
  // Publishes this rank's worker address under "g<generation>/addr/<rank>", waits for the
  // others (connect_timeout), connects, and exchanges one message with every peer.
  UcxCommunicator(std::shared_ptr<UcxContext> context, BootstrapStore& store, int rank, int world,
                  uint64_t generation, UcxOptions options = {});
  // Fails what is still pending (Aborted), then closes in bounded time even when peers
  // are dead or hung.
  ~UcxCommunicator() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  uint64_t generation() const override { return generation_; }

  WorkPtr allreduce_start(Buffer buf, OpId id, Stream stream = nullptr) override;
  WorkPtr broadcast_start(Buffer buf, int root, OpId id, Stream stream = nullptr) override;
  WorkPtr allgather_start(Buffer in, Buffer out, OpId id, Stream stream = nullptr) override;
  WorkPtr barrier_start(OpId id) override;
  WorkPtr send_start(int peer, const void* data, size_t bytes, OpId id) override;
  WorkPtr recv_start(int peer, void* data, size_t bytes, OpId id) override;
  // Blocking forms: the caller drives UCX itself, no hand-off through the progress thread.
  void allreduce(Buffer buf, OpId id) override;
  void broadcast(Buffer buf, int root, OpId id) override;
  void allgather(Buffer in, Buffer out, OpId id) override;
  void barrier(OpId id) override;
  void send(int peer, const void* data, size_t bytes, OpId id) override;
  void recv(int peer, void* data, size_t bytes, OpId id) override;

  // Peers learn of an abort through this rank's "aborted" farewell and fail with Aborted
  // too ("relayed by rank r"): an abort is a revocation (or a stop), nobody's fault.
  void abort(const std::string& reason) override;
  // Peers learn of it through a "failed" farewell naming this rank (comm/communicator.h).
  void abort_failed(const std::string& reason) override;
  bool aborted() const override { return abort_flag_.load(std::memory_order_acquire); }
  void set_stall_timeout(Duration timeout) override {
    stall_ns_.store(std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count(), std::memory_order_relaxed);
  }
  Duration stall_timeout() const override {
    return std::chrono::nanoseconds(stall_ns_.load(std::memory_order_relaxed));
  }
  // Force-closes this rank's endpoints, as if its network went away (comm/communicator.h).
  void inject_drop() override;
  // Fault injection: releases the buffers offered for single-copy reads (clears the hold
  // word, as a failing rank does right after its farewells) without failing or telling
  // anyone, as if the farewell were lost: a peer reading afterwards must fail
  // (ucx/single_copy.h).
  void inject_release();
  // Test hook (generation fencing): sends `bytes` to `peer` tagged with another generation.
  void send_foreign_generation(int peer, uint64_t generation, OpId id, uint32_t chunk, const void* data,
                               size_t bytes);
  const FlightRecorder& flight_recorder() const { return recorder_; }
  // Single-copy path: whether messages from `peer` are read from its memory, and how many
  // such reads this rank did so far (tests, benchmarks).
  bool single_copy_from(int peer) const { return peer >= 0 && peer < world_ && single_copy_from_[peer]; }
  // Whether the shared-memory path (slots, zero-copy) is on for this communicator.
  bool shm_path() const { return shm_ != nullptr; }
  // How many all-reduces went through the slots, and how many were zero-copy, so far.
  uint64_t slot_allreduces() const;
  uint64_t zero_copy_allreduces() const;
  uint64_t single_copy_reads() const { return single_copy_reads_.load(std::memory_order_relaxed); }

  class Pending;  // one started collective; its Work handle

 private:
  // stall_bound: the collective's own (zero: stall_timeout(), as every step's).
  WorkPtr start(std::unique_ptr<Collective> c, bool wake_progress_thread, Duration stall_bound = Duration::zero());
  // Puts p in the queue (or fails it at once when poisoned or aborting: false). With
  // driver_held the caller holds driver_mu_ and active_ is rebuilt under the same lock.
  bool enqueue(Pending& p, const std::shared_ptr<Pending>& owner, bool driver_held);
  // Blocking calls: run c on the calling thread, reusing one Pending (see the .cpp).
  void run_blocking(std::unique_ptr<Collective> c);
  // The collectives, built and checked; *_start and the blocking forms share them.
  std::unique_ptr<Collective> allreduce_op(Buffer buf, OpId id, Stream stream);
  std::unique_ptr<Collective> broadcast_op(Buffer buf, int root, OpId id, Stream stream);
  std::unique_ptr<Collective> allgather_op(Buffer in, Buffer out, OpId id, Stream stream);
  std::unique_ptr<Collective> barrier_op(OpId id);
  std::unique_ptr<Collective> send_op(int peer, const void* data, size_t bytes, OpId id);
  std::unique_ptr<Collective> recv_op(int peer, void* data, size_t bytes, OpId id);
  void validate(const Buffer& b, OpId id, Stream stream, const char* what) const;
  void wait_for(Pending& p, TimePoint deadline);
  template <typename Until>
  void drive(std::unique_lock<std::mutex>& driver_lock, Until until, TimePoint deadline);
  // Construction: options checked and defaulted; the transport connected through the
  // store; this rank's identity (and its shared-memory session); the handshake and the
  // paths it agreed on.
  void check_and_default_options();
  void connect_transport(BootstrapStore& store);
  HelloAll::Identity identity();
  void handshake(const HelloAll::Identity& me);
  void take_single_copy_paths(const HelloAll& hello);
  void take_shm_path(const HelloAll& hello);
  // One pass of the driver: abort or drop asked for, the transport driven, farewells and
  // dead peers noticed, then every runnable collective advanced. True when it moved.
  bool pump();
  bool poison_if_aborted_or_dropped();  // true: it poisoned
  Duration stall_bound(const Pending& p) const;  // p's own, else stall_timeout()
  bool check_dead_peers();               // true: a dead peer poisoned us
  enum class Step : uint8_t { running, finished, poisoned };
  Step advance_one(Pending& p, bool check_stall, TimePoint now, bool& moved);
  void fail_stalled(Pending& p, TimePoint now);
  void hand_back_finished();
  bool check_farewells();  // true: a peer's "failed" or "aborted" farewell poisoned us
  void rebuild_active();   // under queue_mu_
  // Fails everything (a peer failed, a stall, an abort) and says farewell: an abort with
  // relay_reason set sends "aborted" carrying it (nobody's fault); any other poison sends
  // "failed" naming info.peer, or this rank when it names none (or aborted as failed).
  void poison(PoisonKind kind, CommErrorInfo info, const std::string* relay_reason = nullptr);
  void tell_peers(PoisonKind kind, const CommErrorInfo& info, const std::string* relay_reason);
  void fail_all(std::deque<std::shared_ptr<Pending>>& failed, PoisonKind kind, const CommErrorInfo& info);
  void dump_flight_record();
  void abort_with(const std::string& reason, bool blame_self);
  void poison_aborted();  // the abort flag is set: poison as abort() / abort_failed() asked
  void progress_thread_main();
  uint64_t farewell_tag(int sender) const;

  std::shared_ptr<UcxContext> context_;
  int rank_, world_;
  uint64_t generation_;
  UcxOptions opt_;
  FlightRecorder recorder_;
  std::vector<char> small_staging_, ring_staging_;  // pre-touched, reused by every call
  std::vector<bool> single_copy_from_;              // set once, when connecting
  std::unique_ptr<ShmSession> shm_;                 // null: the shared-memory path is off
  std::vector<char> zero_copy_scratch_;             // partial sums of the zero-copy path
  std::atomic<uint64_t> single_copy_reads_{0};      // the transport's count, after each pump

  std::mutex driver_mu_;  // whoever holds it drives UCX (transport_, the collectives)
  // Who holds driver_mu_ (none while napping). Only ever compared with the reader's own id
  // (abort() from an on_chunk callback), so relaxed stores suffice.
  std::atomic<std::thread::id> driver_id_{};
  std::unique_ptr<UcxTransport> transport_;
  std::vector<std::unique_ptr<Collective>> graveyard_;  // failed collectives with requests in flight
  bool poisoned_ = false;
  std::vector<Pending*> active_;                 // what pump() advances (driver only)
  uint64_t active_version_ = ~uint64_t{0};       // queue_version_ active_ was built from
  unsigned stall_countdown_ = 0;
  unsigned farewell_countdown_ = 0;
  static constexpr unsigned kShmProgressEvery = 16;
  unsigned transport_skip_ = 0;
  std::vector<std::shared_ptr<Pending>> done_;   // scratch of pump(), reused
  // Farewells: each rank sends every peer exactly one: "goodbye" when it is destroyed in
  // order, "failed" (naming the culprit) when it is poisoned by a failure, "aborted"
  // (carrying the reason) when it was aborted — revoked or told to stop, which is nobody's
  // failure, so its peers fail as aborted too instead of blaming it. One receive per peer
  // is posted at connection time. See check_farewells() and poison().
  enum : uint32_t { kGoodbye = 1, kFailed = 2, kAborted = 3 };
  struct Farewell {
    uint32_t kind = 0;
    int32_t culprit = -1;  // kFailed only
    char cause[120] = {};  // kFailed: why the culprit failed; kAborted: the abort reason
  };
  void send_farewells(uint32_t kind, int culprit, const std::string& cause, TimePoint deadline);
  std::vector<Transfer> farewell_recv_;
  std::vector<Farewell> farewell_in_;
  Farewell farewell_out_;
  std::vector<bool> departed_;
  int departed_count_ = 0;

  std::mutex queue_mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Pending>> queue_;  // started, not finished, in start order
  std::optional<PoisonKind> poison_kind_;        // set once failed
  CommErrorInfo poison_info_;
  bool stop_ = false;

  std::atomic<bool> blocking_busy_{false};       // a thread is using blocking_spare_
  std::shared_ptr<Pending> blocking_spare_;      // reused by run_blocking (guarded by blocking_busy_)
  std::atomic<int> waiters_{0};
  std::atomic<uint64_t> queue_version_{0};  // bumped on every change of queue_
  std::atomic<size_t> queued_{0};           // queue_.size(), readable without the lock
  std::atomic<bool> abort_flag_{false};
  std::atomic<int64_t> stall_ns_{0};  // D3, from opt_.stall_timeout, then set_stall_timeout()
  std::atomic<bool> drop_flag_{false};
  std::mutex abort_mu_;
  std::string abort_reason_;
  bool abort_blames_self_ = false;  // abort_failed(): peers are told this rank failed
  std::thread progress_thread_;
};

}  // namespace rf::comm
