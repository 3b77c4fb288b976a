#include "comm/ucx/ucx_communicator.h"

#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>

#include "base/enforce.h"
#include "base/error.h"
#include "base/log.h"
#include "base/str.h"
#include "comm/algorithms.h"
#include "comm/shm/shm_session.h"
#include "comm/host_identity.h"
#include "comm/tag.h"
#include "comm/ucx/hello_all.h"
#include "comm/ucx/ucx_pending.h"
#include "comm/ucx/single_copy.h"
#include "comm/ucx/ucx_transport.h"

namespace rf::comm {

using namespace ucx_detail;

UcxCommunicator::UcxCommunicator(std::shared_ptr<UcxContext> context, BootstrapStore& store, int rank, int world,
                                 uint64_t generation, UcxOptions options)
    : context_(std::move(context)),
      rank_(rank),
      world_(world),
      generation_(generation),
      opt_(std::move(options)),
      recorder_(std::max<size_t>(1, opt_.flight_records), rank) {
  check_and_default_options();
  // Zero-filled vectors: the pages are touched now, once, not inside a collective.
  small_staging_.assign(std::max<size_t>(static_cast<size_t>(opt_.small_allreduce_bytes), 8), 0);
  ring_staging_.assign(static_cast<size_t>(opt_.flows) * opt_.chunk_bytes, 0);
  connect_transport(store);
  // Before the handshake: pump() reads departed_ as soon as any endpoint fails, and a peer
  // may die while the handshake runs.
  departed_.assign(world, false);
  handshake(identity());
  progress_thread_ = std::thread([this] { progress_thread_main(); });
}

void UcxCommunicator::check_and_default_options() {
  if (world_ < 1 || rank_ < 0 || rank_ >= world_) {
    throw rf::InvalidInput(rf::str("communicator: rank ", rank_, " of world size ", world_));
  }
  set_stall_timeout(opt_.stall_timeout);
  if (generation_ > StepTag::kMaxGeneration) {
    throw rf::InvalidInput(rf::str("communicator: generation ", generation_, " does not fit the tag (max ",
                                   StepTag::kMaxGeneration, ")"));
  }
  if (opt_.flows < 1 || opt_.flows > Collective::kMaxFlows || opt_.chunk_bytes < 64) {
    throw rf::InvalidInput(rf::str("communicator: flows ", opt_.flows, " (1..", Collective::kMaxFlows,
                                   "), chunk_bytes ", opt_.chunk_bytes, " (>= 64)"));
  }
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const bool oversubscribed = static_cast<unsigned>(world_) > hw;
  if (opt_.idle_spins < 0) opt_.idle_spins = oversubscribed ? 0 : 8;
  if (opt_.small_allreduce_bytes < 0) opt_.small_allreduce_bytes = world_ <= 4 ? (128 << 10) : (16 << 10);
  if (opt_.single_copy && opt_.single_copy_bytes == 0) opt_.single_copy = false;
  if (opt_.single_copy_max_bytes < 0) opt_.single_copy_max_bytes = oversubscribed ? INT64_MAX : (int64_t{8} << 20);
}

// Publishes this rank's UCX address under the generation's scope, reads every peer's and
// connects; errors name this rank, the generation and (waiting) the peer.
void UcxCommunicator::connect_transport(BootstrapStore& store) {
  transport_ = std::make_unique<UcxTransport>(context_, rank_, world_, opt_.tag_key);
  const std::string prefix = rf::str("g", generation_, "/addr/");
  store.set(prefix + std::to_string(rank_), transport_->address());
  std::vector<std::vector<uint8_t>> addresses(world_);
  for (int r = 0; r < world_; ++r) {
    try {
      addresses[r] = store.wait_get(prefix + std::to_string(r), opt_.connect_timeout);
    } catch (const TimedOut& e) {
      CommErrorInfo i = e.info();
      i.rank = rank_;
      i.generation = static_cast<int64_t>(generation_);
      i.peer = r;
      throw TimedOut(i);
    }
  }
  try {
    transport_->connect(addresses);
  } catch (const PeerFailed& e) {
    CommErrorInfo i = e.info();
    i.rank = rank_;
    i.generation = static_cast<int64_t>(generation_);
    throw PeerFailed(i);
  }
}

// What this rank tells its peers in the handshake; opens the shared-memory session when
// asked for (a failure only turns that path off).
HelloAll::Identity UcxCommunicator::identity() {
  HelloAll::Identity me;
  me.rank = rank_;
  me.pid = static_cast<int64_t>(getpid());
  me.hold_address = transport_->hold_address();
  me.hold_token = transport_->hold_token();
  me.host = host_identity_hash();
  me.single_copy_bytes = opt_.single_copy ? opt_.single_copy_bytes : 0;
  me.single_copy_max_bytes = static_cast<uint64_t>(opt_.single_copy_max_bytes);
  if (opt_.shm && world_ > 1) {
    try {
      shm_ = std::make_unique<ShmSession>(rank_, world_, generation_, std::max<size_t>(opt_.shm_slot_bytes, 8));
      me.shm_fd = shm_->fd();
      me.shm_token = shm_->token();
    } catch (const rf::Error& e) {
      static std::atomic<bool> said{false};
      if (rf::log::first(said)) rf::log::warn("comm", "no shared-memory path: ", e.what());
    }
  }
  return me;
}

// Every rank meets every other (HelloAll), then takes the paths every pair agreed on: the
// single-copy reads and the shared-memory collectives, decided alike on every rank.
void UcxCommunicator::handshake(const HelloAll::Identity& me) {
  auto hello_coll = std::make_unique<HelloAll>(rank_, world_, me, opt_.single_copy, shm_.get());
  const HelloAll& hello = *hello_coll;  // owned by the Work until it is released
  // Bounded by the connect deadline, not by the stall bound of the steps to come: its first
  // message to each peer waits for that pair's TCP connection, and on a lossy link each lost
  // SYN or SYN-ACK costs a second (a recovery's stall bound is 1.5 s). A peer that dies
  // still fails it at once (D1), a revocation still aborts it.
  auto work = start(std::move(hello_coll), false, opt_.connect_timeout);
  work->wait(Clock::now() + opt_.connect_timeout);
  std::lock_guard dl(driver_mu_);
  take_single_copy_paths(hello);
  take_shm_path(hello);
  departed_.assign(world_, false);
  farewell_recv_.resize(world_);
  farewell_in_.assign(world_, Farewell{});
  for (int peer = 0; peer < world_; ++peer) {
    if (peer == rank_) continue;
    transport_->post_recv(farewell_recv_[peer], peer, &farewell_in_[peer], sizeof(Farewell), farewell_tag(peer), false);
  }
}

void UcxCommunicator::take_single_copy_paths(const HelloAll& hello) {
  single_copy_from_.assign(world_, false);
  if (!opt_.single_copy) return;
  transport_->set_single_copy_bytes(opt_.single_copy_bytes);
  for (int peer = 0; peer < world_; ++peer) {
    if (peer == rank_) continue;
    transport_->set_single_copy(peer, hello.pid(peer), hello.peer_reads_me(peer), hello.can_read(peer));
    single_copy_from_[peer] = hello.can_read(peer);
  }
  static std::atomic<bool> said{false};  // once per process, not per generation
  if (!hello.probe_failure().empty() && rf::log::first(said)) {
    rf::log::warn("comm", "rank ", rank_, " does not take the single-copy path with ", hello.probe_failure(),
                  "; large messages between them go through UCX's shared-memory FIFOs (two copies)");
  }
}

void UcxCommunicator::take_shm_path(const HelloAll& hello) {
  if (shm_ && !hello.shm_all()) {
    static std::atomic<bool> said{false};  // once per process, not per generation
    if (!hello.shm_failure().empty() && rf::log::first(said)) {
      rf::log::warn("comm", "rank ", rank_, " does not take the shared-memory path with ", hello.shm_failure(),
                    "; all-reduces use UCX messages");
    }
    shm_.reset();  // every rank sees a pair that cannot, and turns it off alike
  }
  if (shm_) {
    zero_copy_scratch_.assign(size_t{64} << 10, 0);
    shm_->forget_other_processes();  // a dead rank's buffers: unmapped once nobody uses them
  }
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
      poison(PoisonKind::abort, i);
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

WorkPtr UcxCommunicator::start(std::unique_ptr<Collective> c, bool wake_progress_thread, Duration stall_bound) {
  auto p = std::make_shared<Pending>(this, std::move(c));
  p->id = p->coll->id();
  p->name = p->coll->name();
  p->stall_bound = stall_bound;
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
    const PoisonKind kind = poison_kind_.value_or(PoisonKind::abort);
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
    p.state.store(ucx_detail::kFailed, std::memory_order_release);
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
  if (p->state.load(std::memory_order_acquire) == ucx_detail::kFailed) error = p->error;
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
