#include "comm/ucx/ucx_communicator.h"

#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>

#include "base/enforce.h"
#include "base/error.h"
#include "base/str.h"
#include "comm/algorithms.h"
#include "comm/shm_session.h"
#include "comm/host_identity.h"
#include "comm/tag.h"
#include "comm/ucx/single_copy.h"
#include "comm/ucx/ucx_transport.h"

namespace rf::comm {

namespace {

enum : int { kRunning = 0, kDone = 1, kFailed = 2 };

std::exception_ptr make_error(const char* kind, const CommErrorInfo& i) {
  if (std::strcmp(kind, "abort") == 0) return std::make_exception_ptr(Aborted(i));
  if (std::strcmp(kind, "timeout") == 0) return std::make_exception_ptr(TimedOut(i));
  return std::make_exception_ptr(PeerFailed(i));
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Every peer sends every other its identity once (rank, pid, where its hold word is and
// what it holds), so every endpoint is wired up (and a peer that dies later is seen by all,
// not only by its ring neighbours). Each rank then probes whether it can read each peer's
// memory (process_vm_readv of the hold word: same host, same uid, ptrace allowed) and a
// second pass tells every peer the answer, so both ends of a pair agree on the single-copy
// path (single_copy.h). Then 80 more passes of 8000-byte messages: the shared-memory FIFO
// between two ranks has 64 elements of ~8 KiB whose pages are only faulted in as messages
// first fill them (~13 us per 4 KiB page here, measured: the first ~100 ms of collectives
// ran 2-3x slower); that cost belongs to connecting, not to the first collectives.
class HelloAll : public Collective {
 public:
  static constexpr uint64_t kWarmPasses = 80;
  static constexpr size_t kWarmBytes = 8000;
  struct Identity {
    int64_t rank = -1;
    int64_t pid = 0;
    uint64_t hold_address = 0;
    uint64_t hold_token = 0;
    uint64_t single_copy_bytes = 0;  // 0: this rank does not use the single-copy path
    uint64_t single_copy_max_bytes = 0;  // its cap on the collective's size
    int64_t shm_fd = -1;                 // its shared-memory segment (-1: path off)
    uint64_t shm_token = 0;
    uint64_t host = 0;                   // host_identity_hash(): shared memory only within one host
  };
  // What pass 1 tells a peer about it (bits), and pass 2 everyone about this rank.
  static constexpr uint64_t kReadsSingleCopy = 1, kMapsShm = 2;
  // probe: this rank uses the single-copy path (me.single_copy_bytes > 0).
  HelloAll(int rank, int world, Identity me, bool probe, ShmSession* shm)
      : Collective("connect", OpId{0, StepTag::kInternalOp}, 1),
        rank_(rank),
        world_(world),
        probe_(probe),
        shm_(shm),
        me_(me),
        got_(world),
        can_read_(world, 0),
        peer_reads_me_(world, 0),
        shm_ok_in_(world, 0),
        warm_out_(kWarmBytes, 1),
        warm_in_(kWarmBytes, 0) {}
  uint64_t bytes() const override { return sizeof(Identity); }
  bool plan(int, uint64_t k, Round& r) override {
    const uint64_t per_pass = static_cast<uint64_t>(world_ - 1);
    if (per_pass == 0 || k >= (3 + kWarmPasses) * per_pass) return false;
    const uint64_t pass = k / per_pass;
    const int d = static_cast<int>(k % per_pass) + 1;
    r = Round{};
    r.chunk = static_cast<uint32_t>(k + 1);
    r.send_peer = (rank_ + d) % world_;
    r.recv_peer = (rank_ - d + world_) % world_;
    if (pass == 0) {
      r.send_data = &me_;
      r.recv_data = &got_[r.recv_peer];
      r.send_bytes = r.recv_bytes = sizeof(Identity);
    } else if (pass == 1) {  // "I can read you": sent after every probe of pass 0 is done
      r.send_data = &can_read_[r.send_peer];
      r.recv_data = &peer_reads_me_[r.recv_peer];
      r.send_bytes = r.recv_bytes = sizeof(uint64_t);
    } else if (pass == 2) {
      // "I map every peer and every peer maps me": the shared-memory path is all-to-all, so
      // it is on only if every rank says so (every rank then decides alike).
      if (k == 2 * per_pass) {
        shm_ok_out_ = shm_ != nullptr ? 1 : 0;
        for (int p = 0; p < world_; ++p) {
          if (p != rank_ && !((can_read_[p] & kMapsShm) && (peer_reads_me_[p] & kMapsShm))) shm_ok_out_ = 0;
        }
      }
      r.send_data = &shm_ok_out_;
      r.recv_data = &shm_ok_in_[r.recv_peer];
      r.send_bytes = r.recv_bytes = sizeof(uint64_t);
    } else {
      r.send_data = warm_out_.data();
      r.recv_data = warm_in_.data();
      r.send_bytes = r.recv_bytes = kWarmBytes;
    }
    return true;
  }
  void complete(int, uint64_t k, const Round& r) override {
    if (k >= static_cast<uint64_t>(world_ - 1)) return;
    const Identity& id = got_[r.recv_peer];
    if (id.rank != r.recv_peer) {
      throw rf::InvalidInput(rf::str("connect: rank ", r.recv_peer, " introduced itself as ", id.rank));
    }
    // Another host (comm/host_identity.h) may share this kernel's memory, but a network
    // separates them: no shared-memory path and no single copy between them.
    const bool same_host = id.host == me_.host;
    if (shm_ != nullptr && !same_host) {
      if (shm_failure_.empty()) shm_failure_ = rf::str("rank ", r.recv_peer, ": it is on another host");
    } else if (shm_ != nullptr && id.shm_fd >= 0 && id.shm_fd <= INT32_MAX) {
      const std::string why = shm_->attach(r.recv_peer, static_cast<pid_t>(id.pid), static_cast<int>(id.shm_fd),
                                           id.shm_token);
      if (why.empty()) can_read_[r.recv_peer] |= kMapsShm;
      else if (shm_failure_.empty()) shm_failure_ = rf::str("rank ", r.recv_peer, ": ", why);
    } else if (shm_ != nullptr && shm_failure_.empty()) {
      shm_failure_ = rf::str("rank ", r.recv_peer, ": it has the shared-memory path off");
    }
    if (!probe_ || !same_host) return;  // across hosts UCX carries every byte: nothing to report
    // A pair takes the path only if both ends use it with the same threshold: then every
    // message's "offer or bytes" is decided alike on both sides (else FIFOs, logged).
    std::string why;
    if (id.single_copy_bytes != me_.single_copy_bytes) {
      why = rf::str("it uses single_copy_bytes ", id.single_copy_bytes, ", this rank ", me_.single_copy_bytes);
    } else if (id.single_copy_max_bytes != me_.single_copy_max_bytes) {
      why = rf::str("it uses single_copy_max_bytes ", id.single_copy_max_bytes, ", this rank ",
                    me_.single_copy_max_bytes);
    } else {
      uint64_t v = 0;
      why = read_remote(static_cast<pid_t>(id.pid), &v, id.hold_address, sizeof(v));
      if (why.empty() && v != id.hold_token) why = "probe read the wrong value (another host?)";
    }
    if (why.empty()) can_read_[r.recv_peer] |= kReadsSingleCopy;
    if (!why.empty() && probe_failure_.empty()) probe_failure_ = rf::str("rank ", r.recv_peer, ": ", why);
  }
  int64_t pid(int peer) const { return got_[peer].pid; }
  bool can_read(int peer) const { return (can_read_[peer] & kReadsSingleCopy) != 0; }
  bool peer_reads_me(int peer) const { return (peer_reads_me_[peer] & kReadsSingleCopy) != 0; }
  const std::string& probe_failure() const { return probe_failure_; }
  // Every rank maps every other (the shared-memory path is on for all, or for none).
  bool shm_all() const {
    if (shm_ == nullptr || shm_ok_out_ != 1) return false;
    for (int p = 0; p < world_; ++p) {
      if (p != rank_ && shm_ok_in_[p] != 1) return false;
    }
    return true;
  }
  const std::string& shm_failure() const { return shm_failure_; }

 private:
  int rank_, world_;
  bool probe_;
  ShmSession* shm_;
  Identity me_;
  std::vector<Identity> got_;
  std::vector<uint64_t> can_read_, peer_reads_me_, shm_ok_in_;
  uint64_t shm_ok_out_ = 0;
  std::string probe_failure_, shm_failure_;
  std::vector<char> warm_out_, warm_in_;
};

}  // namespace

class UcxCommunicator::Pending : public Work {
 public:
  Pending(UcxCommunicator* owner, std::unique_ptr<Collective> c) : owner_(owner), coll(std::move(c)) {}

  bool test() override {
    int s = state.load(std::memory_order_acquire);
    if (s == kRunning && owner_->driver_mu_.try_lock()) {
      // Help along, once, without waiting for the driver lock.
      std::lock_guard dl(owner_->driver_mu_, std::adopt_lock);
      owner_->driver_id_.store(std::this_thread::get_id(), std::memory_order_relaxed);
      owner_->pump();
      owner_->driver_id_.store(std::thread::id{}, std::memory_order_relaxed);
      s = state.load(std::memory_order_acquire);
    }
    if (s == kFailed) std::rethrow_exception(error);
    return s == kDone;
  }

  void wait(TimePoint deadline) override {
    if (state.load(std::memory_order_acquire) == kRunning) owner_->wait_for(*this, deadline);
    const int s = state.load(std::memory_order_acquire);
    if (s == kFailed) std::rethrow_exception(error);
    if (s == kRunning) {
      CommErrorInfo i;
      i.rank = owner_->rank_;
      i.collective = coll ? coll->name() : "collective";
      i.generation = static_cast<int64_t>(owner_->generation_);
      i.step = static_cast<int64_t>(id.step);
      i.op = id.op;
      i.cause = "wait deadline passed; the collective keeps running";
      throw TimedOut(i);
    }
  }

  UcxCommunicator* owner_;
  std::unique_ptr<Collective> coll;
  OpId id{};
  const char* name = "";
  std::atomic<int> state{kRunning};
  std::exception_ptr error;
  uint64_t seq = 0;
  bool running = false;   // started running (driver only)
  bool finished = false;  // all rounds done, not yet handed back (driver only)
  bool progress_seen = false;  // a transfer finished since the last stall check (driver only)
  TimePoint last_progress{};
};

UcxCommunicator::UcxCommunicator(std::shared_ptr<UcxContext> context, BootstrapStore& store, int rank, int world,
                                 uint64_t generation, UcxOptions options)
    : context_(std::move(context)),
      rank_(rank),
      world_(world),
      generation_(generation),
      opt_(std::move(options)),
      recorder_(std::max<size_t>(1, opt_.flight_records), rank) {
  if (world < 1 || rank < 0 || rank >= world) {
    throw rf::InvalidInput(rf::str("communicator: rank ", rank, " of world size ", world));
  }
  set_stall_timeout(opt_.stall_timeout);
  if (generation > StepTag::kMaxGeneration) {
    throw rf::InvalidInput(rf::str("communicator: generation ", generation, " does not fit the tag (max ",
                                   StepTag::kMaxGeneration, ")"));
  }
  if (opt_.flows < 1 || opt_.flows > Collective::kMaxFlows || opt_.chunk_bytes < 64) {
    throw rf::InvalidInput(rf::str("communicator: flows ", opt_.flows, " (1..", Collective::kMaxFlows,
                                   "), chunk_bytes ", opt_.chunk_bytes, " (>= 64)"));
  }
  if (opt_.idle_spins < 0) {
    const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    opt_.idle_spins = static_cast<unsigned>(world) <= hw ? 8 : 0;
  }
  // Zero-filled vectors: the pages are touched now, once, not inside a collective.
  if (opt_.small_allreduce_bytes < 0) opt_.small_allreduce_bytes = world <= 4 ? (128 << 10) : (16 << 10);
  small_staging_.assign(std::max<size_t>(static_cast<size_t>(opt_.small_allreduce_bytes), 8), 0);
  ring_staging_.assign(static_cast<size_t>(opt_.flows) * opt_.chunk_bytes, 0);

  transport_ = std::make_unique<UcxTransport>(context_, rank, world, opt_.tag_key);
  const std::string prefix = rf::str("g", generation, "/addr/");
  store.set(prefix + std::to_string(rank), transport_->address());
  std::vector<std::vector<uint8_t>> addresses(world);
  for (int r = 0; r < world; ++r) {
    try {
      addresses[r] = store.wait_get(prefix + std::to_string(r), opt_.connect_timeout);
    } catch (const TimedOut& e) {
      CommErrorInfo i = e.info();
      i.rank = rank;
      i.generation = static_cast<int64_t>(generation);
      i.peer = r;
      throw TimedOut(i);
    }
  }
  try {
    transport_->connect(addresses);
  } catch (const PeerFailed& e) {
    CommErrorInfo i = e.info();
    i.rank = rank;
    i.generation = static_cast<int64_t>(generation);
    throw PeerFailed(i);
  }
  // Before the handshake: pump() reads departed_ as soon as any endpoint fails, and a peer
  // may die while the handshake runs.
  departed_.assign(world, false);
  HelloAll::Identity me;
  me.rank = rank;
  me.pid = static_cast<int64_t>(getpid());
  me.hold_address = transport_->hold_address();
  me.hold_token = transport_->hold_token();
  me.host = host_identity_hash();
  if (opt_.single_copy && opt_.single_copy_bytes == 0) opt_.single_copy = false;
  if (opt_.single_copy_max_bytes < 0) {
    const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    opt_.single_copy_max_bytes = static_cast<unsigned>(world) <= hw ? (int64_t{8} << 20) : INT64_MAX;
  }
  me.single_copy_bytes = opt_.single_copy ? opt_.single_copy_bytes : 0;
  me.single_copy_max_bytes = static_cast<uint64_t>(opt_.single_copy_max_bytes);
  if (opt_.shm && world > 1) {
    try {
      shm_ = std::make_unique<ShmSession>(rank, world, generation, std::max<size_t>(opt_.shm_slot_bytes, 8));
      me.shm_fd = shm_->fd();
      me.shm_token = shm_->token();
    } catch (const rf::Error& e) {
      static std::atomic<bool> logged{false};
      if (!logged.exchange(true)) std::cerr << "ringfence comm: no shared-memory path: " << e.what() << "\n";
    }
  }
  auto hello_coll = std::make_unique<HelloAll>(rank, world, me, opt_.single_copy, shm_.get());
  const HelloAll& hello_result = *hello_coll;  // owned by the Work until it is released
  auto hello = start(std::move(hello_coll), false);
  hello->wait(Clock::now() + opt_.connect_timeout);
  {
    std::lock_guard dl(driver_mu_);
    single_copy_from_.assign(world, false);
    if (opt_.single_copy) {
      transport_->set_single_copy_bytes(opt_.single_copy_bytes);
      for (int peer = 0; peer < world; ++peer) {
        if (peer == rank) continue;
        transport_->set_single_copy(peer, hello_result.pid(peer), hello_result.peer_reads_me(peer),
                                    hello_result.can_read(peer));
        single_copy_from_[peer] = hello_result.can_read(peer);
      }
      if (!hello_result.probe_failure().empty()) {
        static std::atomic<bool> logged{false};  // once per process, not per generation
        if (!logged.exchange(true)) {
          std::cerr << "ringfence comm: rank " << rank << " does not take the single-copy path with "
                    << hello_result.probe_failure() << "; large messages between them go through UCX's shared-memory FIFOs (two copies)\n";
        }
      }
    }
    if (shm_ && !hello_result.shm_all()) {
      if (!hello_result.shm_failure().empty()) {
        static std::atomic<bool> logged{false};  // once per process, not per generation
        if (!logged.exchange(true)) {
          std::cerr << "ringfence comm: rank " << rank << " does not take the shared-memory path with "
                    << hello_result.shm_failure() << "; all-reduces use UCX messages\n";
        }
      }
      shm_.reset();  // every rank sees a pair that cannot, and turns it off alike
    }
    if (shm_) {
      zero_copy_scratch_.assign(size_t{64} << 10, 0);
      shm_->forget_other_processes();  // a dead rank's buffers: unmapped once nobody uses them
    }
    departed_.assign(world, false);
    farewell_recv_.resize(world);
    farewell_in_.assign(world, Farewell{});
    for (int peer = 0; peer < world; ++peer) {
      if (peer == rank) continue;
      transport_->post_recv(farewell_recv_[peer], peer, &farewell_in_[peer], sizeof(Farewell), farewell_tag(peer), false);
    }
  }
  progress_thread_ = std::thread([this] { progress_thread_main(); });
}

UcxCommunicator::~UcxCommunicator() {
  {
    std::lock_guard lk(queue_mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (progress_thread_.joinable()) progress_thread_.join();
  std::lock_guard dl(driver_mu_);
  bool pending;
  {
    std::lock_guard lk(queue_mu_);
    pending = !queue_.empty();
  }
  if (!poisoned_ && (pending || abort_flag_.load())) {
    // Pending work, or an abort nobody drove yet: end it the forced way, not with a flush.
    if (abort_flag_.load()) {
      poison_aborted();
    } else {
      // Destroyed while peers may still wait on our collectives: the Work fails as
      // Aborted here, but for the peers this rank failed (a "failed" farewell naming it).
      CommErrorInfo i;
      i.cause = "communicator destroyed";
      poison("abort", i);
    }
  }
  const TimePoint deadline = Clock::now() + opt_.teardown_timeout;
  // Say goodbye to every peer, so that our endpoints closing is not taken for a crash.
  if (!poisoned_ && !farewell_recv_.empty()) send_farewells(kGoodbye, -1, "", deadline);
  for (auto& t : farewell_recv_) transport_->cancel(t);
  // A healthy communicator flushes, so its last eager messages reach the peers; a failed
  // one was already force-closed. Both are bounded.
  transport_->close_endpoints(poisoned_, deadline);
  for (auto& t : farewell_recv_) transport_->test(t);
  graveyard_.clear();
  transport_.reset();
  shm_.reset();  // our segment and the peers' mappings go (a peer's mapping of ours stays valid)
}

uint64_t UcxCommunicator::farewell_tag(int sender) const {
  // Internal op, step 1 (step 0 is the hello); chunk = the sender's rank.
  return StepTag{generation_, 1, StepTag::kInternalOp, static_cast<uint32_t>(sender)}.encode();
}

void UcxCommunicator::send_farewells(uint32_t kind, int culprit, const std::string& cause, TimePoint deadline) {
  farewell_out_.kind = kind;
  farewell_out_.culprit = culprit;
  std::snprintf(farewell_out_.cause, sizeof(farewell_out_.cause), "%s", cause.c_str());
  std::vector<Transfer> sends(world_);
  transport_->progress();
  for (int peer = 0; peer < world_; ++peer) {
    // Not to peers that are gone already (failed, or said farewell themselves): their
    // worker may be destroyed, and UCX would only log that it cannot reach it.
    if (peer == rank_ || transport_->peer_failed(peer, nullptr)) continue;
    if (static_cast<size_t>(peer) < farewell_recv_.size() && transport_->test(farewell_recv_[peer])) continue;
    transport_->post_send(sends[peer], peer, &farewell_out_, sizeof(Farewell), farewell_tag(rank_));
  }
  // Small eager messages: on shared memory they are delivered once posted; on TCP a few
  // progress calls push them out. Bounded either way.
  for (bool all = false; !all && Clock::now() < deadline;) {
    transport_->progress();
    all = true;
    for (auto& t : sends) all = (t.state == Transfer::State::idle || transport_->test(t)) && all;
  }
}

WorkPtr UcxCommunicator::start(std::unique_ptr<Collective> c, bool wake_progress_thread) {
  auto p = std::make_shared<Pending>(this, std::move(c));
  p->id = p->coll->id();
  p->name = p->coll->name();
  if (enqueue(*p, p, false) && wake_progress_thread) cv_.notify_one();
  return p;
}

bool UcxCommunicator::enqueue(Pending& p, const std::shared_ptr<Pending>& owner, bool driver_held) {
  // The size cap of the single-copy path: decided from the collective's size, which every
  // rank has alike, so both ends of each message agree (offer or bytes).
  if (p.coll->bytes() > static_cast<uint64_t>(opt_.single_copy_max_bytes)) p.coll->disable_single_copy();
  std::lock_guard lk(queue_mu_);
  p.seq = recorder_.start(p.name, generation_, p.id.step, p.id.op, p.coll->bytes());
  const bool aborting = abort_flag_.load(std::memory_order_acquire);
  if (poison_kind_ || aborting) {
    // Poisoned (or being aborted): fail at once, naming this collective.
    CommErrorInfo i = poison_kind_ ? poison_info_ : CommErrorInfo{};
    const char* kind = poison_kind_ ? poison_kind_ : "abort";
    if (!poison_kind_) {
      std::lock_guard ak(abort_mu_);
      i.cause = abort_reason_;
    }
    i.rank = rank_;
    i.generation = static_cast<int64_t>(generation_);
    i.collective = p.name;
    i.step = static_cast<int64_t>(p.id.step);
    i.op = p.id.op;
    i.chunk = -1;
    p.error = make_error(kind, i);
    recorder_.fail(p.seq, -1, i.peer, i.cause);
    p.state.store(kFailed, std::memory_order_release);
    return false;
  }
  queue_.push_back(owner);
  queued_.store(queue_.size(), std::memory_order_release);
  queue_version_.fetch_add(1, std::memory_order_acq_rel);
  // A caller that holds the driver lock rebuilds what pump() advances now, under this same
  // queue lock, so its first pump needs no second one.
  if (driver_held) rebuild_active();
  return true;
}

// The blocking fast path. One Pending is kept and reused while no handle to it is left
// (use_count 1: not queued, not in done_), so a blocking call allocates no Work; the
// caller takes the driver lock BEFORE entering the queue, enters it and rebuilds active_
// under one queue lock, and drives until its own collective ends. It still goes through
// the queue, so start order against async starts from other threads holds (the queue is
// the one order), the progress thread sees it, and abort() from another thread fails it
// exactly as a started one (drive() lets go of the driver lock whenever it yields).
void UcxCommunicator::run_blocking(std::unique_ptr<Collective> c) {
  std::shared_ptr<Pending> p;
  // blocking_busy_: one thread at a time uses the spare (acquire pairs with the release
  // below, so its fields written by the last user are visible). Others allocate.
  const bool reuse = !blocking_busy_.exchange(true, std::memory_order_acquire);
  if (reuse && blocking_spare_ && blocking_spare_.use_count() == 1) {
    p = blocking_spare_;
    p->error = nullptr;
    p->state.store(kRunning, std::memory_order_relaxed);
    p->running = p->finished = p->progress_seen = false;
    p->coll = std::move(c);
  } else {
    p = std::make_shared<Pending>(this, std::move(c));
    if (reuse) blocking_spare_ = p;
  }
  p->id = p->coll->id();
  p->name = p->coll->name();
  waiters_.fetch_add(1, std::memory_order_acq_rel);  // before the lock: the progress thread lets go
  {
    std::unique_lock dl(driver_mu_);
    if (enqueue(*p, p, true)) {
      drive(dl, [&] { return p->state.load(std::memory_order_acquire) != kRunning; }, TimePoint::max());
    }
  }
  waiters_.fetch_sub(1, std::memory_order_acq_rel);
  if (queued_.load(std::memory_order_acquire) > 0) {  // hand the rest back to the progress thread
    std::lock_guard lk(queue_mu_);
    cv_.notify_one();
  }
  std::exception_ptr error;
  if (p->state.load(std::memory_order_acquire) == kFailed) error = p->error;
  if (reuse) blocking_busy_.store(false, std::memory_order_release);
  if (error) std::rethrow_exception(error);
}

void UcxCommunicator::abort(const std::string& reason) { abort_with(reason, false); }

void UcxCommunicator::abort_failed(const std::string& reason) { abort_with(reason, true); }

void UcxCommunicator::abort_with(const std::string& reason, bool blame_self) {
  {
    std::lock_guard ak(abort_mu_);
    if (abort_flag_.load(std::memory_order_relaxed)) return;  // the first reason wins
    abort_reason_ = reason;
    abort_blames_self_ = blame_self;
  }
  abort_flag_.store(true, std::memory_order_release);
  // Fail everything now, from this thread, if nobody drives at this instant (a driver that
  // gives its core away lets go of the lock); else the driver sees the flag next round.
  // Never from the driving thread itself (an on_chunk callback): it holds the lock.
  if (driver_id_.load() != std::this_thread::get_id()) {
    std::unique_lock dl(driver_mu_, std::try_to_lock);
    if (dl.owns_lock()) {
      driver_id_.store(std::this_thread::get_id(), std::memory_order_relaxed);
      pump();
      driver_id_.store(std::thread::id{}, std::memory_order_relaxed);
    }
  }
  { std::lock_guard lk(queue_mu_); }  // no lost wake-up for the progress thread
  cv_.notify_all();
}

void UcxCommunicator::inject_drop() {
  drop_flag_.store(true, std::memory_order_release);
  { std::lock_guard lk(queue_mu_); }
  cv_.notify_all();
}

void UcxCommunicator::inject_release() {
  // An atomic store into the transport: needs no driver lock (and on_chunk holds it).
  transport_->release_offered_buffers();
  if (shm_) shm_->release();
}

void UcxCommunicator::wait_for(Pending& p, TimePoint deadline) {
  waiters_.fetch_add(1, std::memory_order_acq_rel);
  {
    std::unique_lock dl(driver_mu_);  // the progress thread lets go within one pump
    drive(dl, [&] { return p.state.load(std::memory_order_acquire) != kRunning; }, deadline);
  }
  waiters_.fetch_sub(1, std::memory_order_acq_rel);
  if (queued_.load(std::memory_order_acquire) > 0) {  // hand the rest back to the progress thread
    std::lock_guard lk(queue_mu_);
    cv_.notify_one();
  }
}

// THE wait loop: every thread that drives UCX runs this, and only this.
template <typename Until>
void UcxCommunicator::drive(std::unique_lock<std::mutex>& dl, Until until, TimePoint deadline) {
  // Back-off when nothing happens: spin briefly (a reply is often < 1 us away), then
  // yield the core (2 cores shared by W ranks: a spinning rank starves the peer it waits
  // for), then nap 50 us. Naps stay far below the 10 ms abort bound.
  const unsigned spins = static_cast<unsigned>(opt_.idle_spins), yields = spins + opt_.idle_yields;
  const bool has_deadline = deadline != TimePoint::max();  // clock reads cost here
  unsigned idle = 0;
  driver_id_.store(std::this_thread::get_id(), std::memory_order_relaxed);
  while (!until()) {
    if (pump()) idle = 0;
    else ++idle;
    if (until() || (has_deadline && Clock::now() >= deadline)) break;
    if (idle < spins) {
      cpu_relax();
      continue;
    }
    // Let go of the driver lock while giving the core away: on an overloaded machine we
    // may not run again for milliseconds, and abort() must not wait for us (it fails
    // everything from its own thread when it finds the lock free).
    driver_id_.store(std::thread::id{}, std::memory_order_relaxed);
    dl.unlock();
    if (idle < yields) sched_yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(50));
    dl.lock();
    driver_id_.store(std::this_thread::get_id(), std::memory_order_relaxed);
  }
  driver_id_.store(std::thread::id{}, std::memory_order_relaxed);
}

void UcxCommunicator::rebuild_active() {
  // Caller holds queue_mu_. What may run now: every point-to-point transfer, and the
  // oldest collective.
  active_.clear();
  active_version_ = queue_version_.load(std::memory_order_relaxed);
  bool collective_seen = false;
  for (const auto& p : queue_) {
    if (p->coll->point_to_point()) active_.push_back(p.get());
    else if (!collective_seen) {
      active_.push_back(p.get());
      collective_seen = true;
    }
  }
}

bool UcxCommunicator::check_farewells() {
  // A peer's farewell: "failed" poisons us too, naming the culprit it names (so every
  // survivor blames the dead rank, not the neighbour that noticed first); "aborted" means
  // the peer was revoked (or told to stop): this generation is over for us as well, and
  // nobody failed, so we fail as aborted with its reason, relayed — never blaming the
  // peer, which is alive and did what it was told; "goodbye" means it finished all its
  // collectives and left in order, so its endpoint closing is fine. When several have
  // arrived, a named culprit is the better news: "failed" wins over "aborted".
  int aborted_by = -1;
  for (int peer = 0; peer < static_cast<int>(farewell_recv_.size()); ++peer) {  // none while connecting
    Transfer& t = farewell_recv_[peer];
    if (t.state != Transfer::State::pending || !transport_->test(t) || t.state != Transfer::State::done) continue;
    const Farewell& f = farewell_in_[peer];
    if (f.kind == kGoodbye) {
      departed_[peer] = true;
      ++departed_count_;
    } else if (f.kind == kAborted) {
      if (aborted_by < 0) aborted_by = peer;
    } else {
      CommErrorInfo i;
      i.peer = f.kind == kFailed && f.culprit >= 0 && f.culprit < world_ ? f.culprit : peer;
      const std::string cause(f.cause, strnlen(f.cause, sizeof(f.cause)));
      i.cause = f.kind == kFailed ? rf::str(cause, "; reported by rank ", peer)
                                  : rf::str("farewell of unknown kind ", f.kind, " from rank ", peer);
      poison("peer", i);
      return true;
    }
  }
  if (aborted_by < 0) return false;
  const Farewell& f = farewell_in_[aborted_by];
  const std::string reason(f.cause, strnlen(f.cause, sizeof(f.cause)));
  CommErrorInfo i;  // peer -1: nobody failed
  i.cause = rf::str(reason, "; relayed by rank ", aborted_by);
  poison("abort", i, &reason);  // and relay the bare reason to the peers not told yet
  return true;
}

bool UcxCommunicator::pump() {
  if (poisoned_) {
    drop_flag_.store(false, std::memory_order_relaxed);  // nothing left to drop
    return false;
  }
  if (abort_flag_.load(std::memory_order_acquire)) {
    poison_aborted();
    return true;
  }
  // A plain load first: an atomic exchange on every pump costs the small all-reduce.
  if (drop_flag_.load(std::memory_order_relaxed) && drop_flag_.exchange(false, std::memory_order_acq_rel)) {
    CommErrorInfo i;
    i.peer = rank_;
    i.cause = "transport dropped by inject_drop()";
    poison("peer", i);
    return true;
  }
  // While only shared-memory collectives run, UCX carries nothing they wait for: drive it
  // every kShmProgressEvery-th pump only (it still brings D1's endpoint errors and the
  // farewells, a few microseconds later), since a progress call costs as much as the
  // whole poll of the shared words.
  bool shm_only = !active_.empty();
  for (const Pending* p : active_) shm_only = shm_only && !p->coll->needs_transport();
  unsigned events = 0;
  if (!shm_only || ++transport_skip_ >= kShmProgressEvery) {
    transport_skip_ = 0;
    events = transport_->progress();
  }
  bool moved = events > 0;
  // A farewell can only have arrived if UCX handled an event; polling W requests on every
  // idle pump costs the small all-reduce. Every 64th pump looks anyway (belt and braces).
  if (++farewell_countdown_ >= 64 || events > 0) {
    farewell_countdown_ = 0;
    if (check_farewells()) return true;
  }
  if (transport_->failure_count() != departed_count_) {
    // D1: any dead member dooms every collective of this generation, not only the ones
    // that talk to it directly. But UCX may report a peer's endpoint error (its close, its
    // exit) before it hands us messages that peer sent ahead of it: its goodbye (it left in
    // order, no failure), a "failed" farewell naming the real culprit, or an "aborted" one
    // (it was revoked: nobody to blame, least of all that peer). A peer closes its
    // endpoints only after its farewell sends completed, so those messages are already in
    // our receive queues: drain them (bounded: until UCX has no more events) and read the
    // farewells once more before blaming anyone. (Seen at W = 7, 8 under load: a rank still
    // in the final barrier failed, blaming a rank that had finished it and said goodbye.)
    bool drained = false;
    for (int peer = 0; peer < world_; ++peer) {
      std::string cause;
      if (peer == rank_ || departed_[peer] || !transport_->peer_failed(peer, &cause)) continue;
      if (!drained) {
        drained = true;
        for (int n = 0; n < 256 && transport_->progress() > 0; ++n) {
        }
        if (check_farewells()) return true;
        if (departed_[peer]) continue;
      }
      CommErrorInfo i;
      i.peer = peer;
      i.cause = cause;
      poison("peer", i);
      return true;
    }
  }
  for (;;) {
    // What may run now: every point-to-point transfer, and the oldest collective.
    // Rebuilt only when the queue changed (the common pump changes nothing).
    if (active_version_ != queue_version_.load(std::memory_order_acquire)) {
      std::lock_guard lk(queue_mu_);
      rebuild_active();
    }
    if (active_.empty()) return moved;
    // D3 bookkeeping without a clock read per pump: transfers mark progress; every 128th
    // pump reads the clock, moves last_progress forward where there was progress, and
    // checks the stall timeout where there was none.
    const bool check_stall = ++stall_countdown_ >= 128;
    const TimePoint now = check_stall ? Clock::now() : TimePoint{};
    if (check_stall) stall_countdown_ = 0;
    bool any_finished = false;
    for (Pending* p : active_) {
      if (!p->running) {
        p->running = true;
        p->progress_seen = true;  // the next stall check starts its clock (no read here)
      }
      bool progressed = false;
      try {
        p->finished = p->coll->advance({transport_.get(), generation_, rank_, &opt_.on_chunk, &abort_flag_}, progressed);
      } catch (const CommError& e) {
        // A transfer failed because a peer is gone (e.g. a single-copy read from a rank
        // that exited after failing itself, or that released its buffers on an abort).
        // If that peer said why in a farewell already on its way (poison() sends it before
        // releasing anything), its culprit or its abort is the truth: read everything UCX already holds
        // (as for an endpoint error above; one progress call may stop short of it: seen
        // in kill_noshm at W = 4, a survivor blamed rank 3, which had failed for rank 2
        // and exited, 1 run in 150 under load) and look once more before blaming.
        for (int n = 0; n < 256 && transport_->progress() > 0; ++n) {
        }
        if (check_farewells()) return true;
        poison("peer", e.info());
        return true;
      } catch (const rf::Error& e) {
        CommErrorInfo i;
        i.cause = e.what();
        poison("peer", i);
        return true;
      }
      if (p->finished) {
        any_finished = true;
        continue;
      }
      if (progressed) {
        p->progress_seen = true;
        moved = true;
      }
      if (!check_stall) continue;
      if (p->progress_seen) {
        p->progress_seen = false;
        p->last_progress = now;
      } else if (const Duration stall = stall_timeout(); now - p->last_progress > stall) {  // D3
        CommErrorInfo i;
        int peer;
        int64_t chunk;
        p->coll->waiting_on(peer, chunk);
        i.peer = peer;
        i.chunk = chunk;
        i.collective = p->name;
        i.step = static_cast<int64_t>(p->id.step);
        i.op = p->id.op;
        i.cause = rf::str("no progress for ", std::chrono::duration<double>(now - p->last_progress).count(),
                          " s, stall bound ", std::chrono::duration<double>(stall).count(), " s");
        poison("timeout", i);
        return true;
      }
    }
    single_copy_reads_.store(transport_->single_copy_reads(), std::memory_order_relaxed);
    if (!any_finished) return moved;
    std::vector<std::shared_ptr<Pending>>& done = done_;
    done.clear();
    {
      std::lock_guard lk(queue_mu_);
      for (auto it = queue_.begin(); it != queue_.end();) {
        if ((*it)->finished) {
          done.push_back(std::move(*it));
          // The oldest finishes first almost always: pop_front is cheaper than erase.
          if (it == queue_.begin()) {
            queue_.pop_front();
            it = queue_.begin();
          } else {
            it = queue_.erase(it);
          }
        } else {
          ++it;
        }
      }
      queued_.store(queue_.size(), std::memory_order_release);
      queue_version_.fetch_add(1, std::memory_order_acq_rel);
      rebuild_active();  // under the same lock: the next round needs no second one
    }
    for (auto& p : done) {
      recorder_.finish(p->seq, p->coll->last_chunk(), -1);
      p->state.store(kDone, std::memory_order_release);
    }
    done.clear();
    moved = true;  // and go on with the next collective at once
  }
}

void UcxCommunicator::poison_aborted() {
  CommErrorInfo i;
  bool blame_self;
  {
    std::lock_guard ak(abort_mu_);
    i.cause = abort_reason_;
    blame_self = abort_blames_self_;
  }
  const std::string reason = i.cause;
  poison("abort", i, blame_self ? nullptr : &reason);
}

void UcxCommunicator::poison(const char* kind, CommErrorInfo info, const std::string* relay_reason) {
  poisoned_ = true;
  // Tell every peer first (they may not see the culprit themselves for a while), and
  // before our offered pieces and registered buffers are released below: a peer that
  // finds them released reads what UCX holds for a farewell of ours before it blames us
  // (pump()), so the farewell must already be on its way then.
  if (!farewell_recv_.empty()) {
    const TimePoint deadline = Clock::now() + std::chrono::milliseconds(2);
    if (relay_reason) {
      send_farewells(kAborted, -1, *relay_reason, deadline);
    } else {
      const bool aborted = std::strcmp(kind, "abort") == 0;
      send_farewells(kFailed, aborted || info.peer < 0 ? rank_ : info.peer,
                     aborted ? rf::str("rank ", rank_, " aborted: ", info.cause) : info.cause, deadline);
    }
  }
  // Peers reading our registered buffers fail from now on (before any collective of ours
  // fails, so before our caller can change a buffer): allreduce_zero_copy.cpp.
  if (shm_) shm_->release();
  transport_->shut_down_transfers();  // sends end now; receives are cancelled below
  std::deque<std::shared_ptr<Pending>> failed;
  {
    std::lock_guard lk(queue_mu_);
    failed.swap(queue_);
    queued_.store(0, std::memory_order_release);
    queue_version_.fetch_add(1, std::memory_order_acq_rel);
    poison_kind_ = kind;
    poison_info_ = info;
  }
  // Make sure UCX writes into none of these buffers any more, within a few ms.
  const TimePoint until = Clock::now() + std::chrono::milliseconds(3);  // within the 10 ms abort bound
  for (;;) {
    transport_->progress();
    bool quiet = true;
    for (auto& p : failed) quiet = p->coll->quiesce(*transport_) && quiet;
    if (quiet || Clock::now() >= until) break;
  }
  bool first = true;
  for (auto& p : failed) {
    CommErrorInfo i = info;
    i.rank = rank_;
    i.generation = static_cast<int64_t>(generation_);
    i.collective = p->name;
    i.step = static_cast<int64_t>(p->id.step);
    i.op = p->id.op;
    if (!first) i.chunk = -1;  // only the running collective was inside a chunk
    else if (i.chunk < 0 && std::strcmp(kind, "timeout") != 0) {
      int peer;
      int64_t chunk;
      p->coll->waiting_on(peer, chunk);
      i.chunk = chunk;
    }
    first = false;
    p->error = make_error(kind, i);
    recorder_.fail(p->seq, i.chunk, i.peer, i.cause);
    if (!p->coll->quiesce(*transport_)) graveyard_.push_back(std::move(p->coll));
    p->state.store(kFailed, std::memory_order_release);
  }
  // The flight recorder is the post-mortem: dump it once, when the communicator fails.
  if (opt_.flight_recorder_path.empty()) {
    recorder_.dump(std::cerr);
  } else {
    std::ofstream out(opt_.flight_recorder_path, std::ios::app);
    recorder_.dump(out);
  }
}

void UcxCommunicator::progress_thread_main() {
  for (;;) {
    {
      std::unique_lock lk(queue_mu_);
      cv_.wait(lk, [&] {
        return stop_ || drop_flag_.load() || (!queue_.empty() && waiters_.load(std::memory_order_acquire) == 0);
      });
      if (stop_) return;
    }
    std::unique_lock dl(driver_mu_, std::try_to_lock);
    if (!dl.owns_lock()) {  // a waiting caller drives right now
      std::this_thread::yield();
      continue;
    }
    drive(
        dl,
        [&] {
          if (waiters_.load(std::memory_order_acquire) > 0 || drop_flag_.load()) return waiters_.load() > 0;
          std::lock_guard lk(queue_mu_);
          return stop_ || queue_.empty();
        },
        TimePoint::max());
  }
}

}  // namespace rf::comm
