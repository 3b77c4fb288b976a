// The NCCL backend: forming a generation's communicator (fresh init or ncclCommShrink),
// the wait loop, revocation and teardown. The class is in nccl_impl.h, starting
// operations in nccl_collectives.cpp.
#include <cstring>
#include <fstream>
#include <iostream>

#include "comm/nccl/nccl_impl.h"
#include "comm/nccl/regroup.h"
#include "comm/nccl/unique_id.h"

namespace rf::comm::nccl {

// ---- forming -------------------------------------------------------------------------

NcclCommunicator::NcclCommunicator(const CommOptions& o, NcclCommunicator* previous)
    : rank_(o.rank), world_(o.world), generation_(o.generation), device_(o.device_index), members_(o.members),
      on_chunk_(o.on_chunk), recorder_path_(o.flight_recorder_path), recorder_(256, o.rank),
      stall_ns_(std::chrono::duration_cast<std::chrono::nanoseconds>(o.stall_timeout).count()) {
  if (o.world < 1 || o.rank < 0 || o.rank >= o.world)
    throw rf::InvalidInput(rf::str("NCCL backend: rank ", o.rank, " of world ", o.world));
  DeviceGuard g(device_);
  auto check = [&](cudaError_t e, const char* what) {
    if (e != cudaSuccess)
      throw rf::Error(rf::str("NCCL backend g=", generation_, " rank ", rank_, " cuda:", device_, ": ", what, ": ",
                              cuda_text(e)));
  };
  check(cudaSetDevice(device_), "cudaSetDevice");
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  check(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreate");
  try {
    form(o, previous);
  } catch (...) {
    cudaEventDestroy(ready_);  // no destructor runs for a constructor that throws
    cudaStreamDestroy(stream_);
    throw;
  }
}

void NcclCommunicator::form(const CommOptions& o, NcclCommunicator* previous) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  // Shrink when ranks only left (regroup.h); every member computes the same plan from
  // the same member lists, so all take the same path.
  const bool usable = previous != nullptr && RF_NCCL_HAS_SHRINK && !o.members.empty() &&
                      previous->members().size() > 0;
  RegroupPlan plan;
  if (usable) {
    std::lock_guard lk(previous->loop_mu());
    plan = plan_regroup(previous->members(), o.members, previous->shrinkable() != nullptr);
  } else {
    plan.reason = previous == nullptr ? "no previous communicator"
                  : !RF_NCCL_HAS_SHRINK ? "this NCCL has no ncclCommShrink"
                                        : "no member lists to compare";
  }
#if RF_NCCL_HAS_SHRINK
  if (plan.kind == RegroupPlan::Kind::shrink) {
    std::lock_guard lk(previous->loop_mu());
    const int old_rank = previous->rank();
    if (old_rank < 0 || old_rank >= static_cast<int>(plan.new_rank.size()) || plan.new_rank[old_rank] != rank_)
      throw rf::InvalidInput(rf::str("NCCL backend g=", generation_, ": shrink maps previous rank ", old_rank,
                                     " elsewhere than rank ", rank_));
    std::vector<int> excluded = plan.excluded;
    // A revoked communicator may be shrunk once it is quiescent (nccl.h).
    const TimePoint until = Clock::now() + o.connect_timeout;
    if (ncclResult_t q = settle(previous->shrinkable(), until, false); q == ncclInProgress)
      throw TimedOut(CommErrorInfo{rank_, "bootstrap", static_cast<int64_t>(generation_), -1, -1, -1, -1,
                                   rf::str("g=", previous->generation(), "'s communicator on cuda:", device_,
                                           " is not quiescent after its revocation; cannot shrink it")});
    const int flags = previous->poisoned() ? NCCL_SHRINK_ABORT : NCCL_SHRINK_DEFAULT;
    std::clog << "ringfence: NCCL g=" << generation_ << " rank " << rank_ << " cuda:" << device_
              << ": ncclCommShrink of g=" << previous->generation() << " (" << plan.reason << ")\n";
    ncclResult_t r = ncclCommShrink(previous->shrinkable(), excluded.data(), static_cast<int>(excluded.size()),
                                    &comm_, &cfg, flags);
    if (r == ncclInProgress || r == ncclSuccess) r = settle(comm_, until, false);
    if (r != ncclSuccess) {
      const std::string text = nccl_text(comm_, r);
      if (comm_) ncclCommAbort(comm_);
      comm_ = nullptr;
      CommErrorInfo i{rank_, "bootstrap", static_cast<int64_t>(generation_), -1, -1, -1, -1,
                      rf::str("ncclCommShrink on cuda:", device_, ": ", text)};
      if (r == ncclInProgress) throw TimedOut(i);
      throw PeerFailed(i);
    }
    return;
  }
#endif
  std::clog << "ringfence: NCCL g=" << generation_ << " rank " << rank_ << " cuda:" << device_
            << ": fresh ncclCommInitRankConfig (" << plan.reason << ")\n";
  form_fresh(o, cfg);
}

void NcclCommunicator::form_fresh(const CommOptions& o, ncclConfig_t& cfg) {
  const UniqueId uid = exchange_unique_id(*o.store, generation_, rank_, world_, o.connect_timeout, [this] {
    ncclUniqueId id;
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess)
      throw rf::Error(rf::str("NCCL backend g=", generation_, ": ncclGetUniqueId: ", nccl_text(nullptr, r)));
    return std::vector<uint8_t>(reinterpret_cast<uint8_t*>(&id), reinterpret_cast<uint8_t*>(&id) + sizeof id);
  });
  ncclUniqueId id;
  static_assert(sizeof id == kUniqueIdBytes);
  std::memcpy(&id, uid.data(), sizeof id);
  ncclResult_t r = ncclCommInitRankConfig(&comm_, world_, id, rank_, &cfg);
  if (r == ncclInProgress || r == ncclSuccess) r = settle(comm_, Clock::now() + o.connect_timeout, true);
  if (r != ncclSuccess) {
    const std::string text = r == ncclInProgress ? std::string("still in progress") : nccl_text(comm_, r);
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
    CommErrorInfo i{rank_, "bootstrap", static_cast<int64_t>(generation_), -1, -1, -1, -1,
                    rf::str("ncclCommInitRankConfig of ", world_, " ranks on cuda:", device_, ": ", text)};
    if (r == ncclInProgress) {
      i.cause += rf::str(" after the connect timeout (", o.connect_timeout.count(), " ms)");
      throw TimedOut(i);
    }
    throw PeerFailed(i);
  }
}

ncclResult_t NcclCommunicator::settle(ncclComm_t comm, TimePoint until, bool abortable) {
  for (;;) {
    ncclResult_t st = ncclSuccess;
    if (ncclResult_t r = ncclCommGetAsyncError(comm, &st); r != ncclSuccess) return r;
    if (st != ncclInProgress) return st;
    if (Clock::now() >= until || (abortable && abort_flag_.load(std::memory_order_acquire))) return ncclInProgress;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

NcclCommunicator::~NcclCommunicator() {
  {
    std::lock_guard lk(loop_mu_);
    stop_ = true;
    (void)poll(nullptr, TimePoint::max());  // what has completed finishes normally
    if (!pending_.empty() && !poison_) {
      WaitDecision d;
      d.action = WaitAction::revoke;
      d.kind = ErrorKind::aborted;
      d.error = CommErrorInfo{rank_, "destroy", static_cast<int64_t>(generation_), -1, -1, -1, -1,
                              "communicator destroyed with operations pending"};
      revoke(d);
    }
  }
  cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  DeviceGuard g(device_);
  // ncclCommAbort, not ncclCommFinalize: finalizing waits for peers, which may be dead;
  // the generation is over either way. Nothing here synchronizes the device (a stuck
  // kernel on a caller's stream must not hang teardown): streams and events are released
  // by CUDA once their work completes.
  if (comm_) ncclCommAbort(comm_);
  for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
  if (ready_) cudaEventDestroy(ready_);
  if (stream_) cudaStreamDestroy(stream_);
  if (!leaked_.empty())
    std::clog << "ringfence: NCCL g=" << generation_ << " cuda:" << device_ << ": " << leaked_.size()
              << " staging slot(s) under revoked copies are not reused\n";
}

// ---- the wait loop -------------------------------------------------------------------

WaitObservation NcclCommunicator::observe_shared(TimePoint now) {
  WaitObservation o;
  o.now = now;
  if (abort_flag_.load(std::memory_order_acquire)) {
    std::lock_guard ak(abort_mu_);
    o.abort_requested = true;
    o.abort_reason = abort_reason_;
    o.abort_failed = abort_blames_self_;
  }
  if (comm_) {
    ncclResult_t st = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm_, &st);
    if (r != ncclSuccess) st = r;
    if (st == ncclInProgress) {
      o.async = AsyncState::in_progress;
    } else if (st != ncclSuccess) {
      o.async = AsyncState::error;
      o.async_code = static_cast<int>(st);
      o.async_text = rf::str(nccl_text(comm_, st, false), " on cuda:", device_);
    }
  }
  return o;
}

NcclCommunicator::PollResult NcclCommunicator::poll(NcclOp* waiting, TimePoint caller_deadline) {
  PollResult out;
  if (poison_) {
    for (auto& p : pending_) {
      p->error = poisoned_error(*p);
      recorder_.fail(p->seq, -1, poison_decision_.error.peer, poison_decision_.error.cause);
      release_staging(p->slot);  // never enqueued: nothing copies into it
      p->state = NcclOp::failed;
    }
    pending_.clear();
    return out;
  }
  if (pending_.empty()) return out;
  DeviceGuard g(device_);
  const TimePoint now = Clock::now();
  const WaitObservation shared = observe_shared(now);
  WaitOptions opt;
  opt.stall_timeout = stall_timeout();  // read afresh: set_stall_timeout applies now (D3)
  opt.poll_interval = kWaitPoll;
  const bool dropped = drop_flag_.load(std::memory_order_acquire);
  for (size_t i = 0; i < pending_.size();) {
    NcclOp& op = *pending_[i];
    WaitObservation obs = shared;
    if (i == 0) {
      // Operations complete in order on our one stream: only the first can be stuck, and
      // the ones behind it have made all the progress they can until it completes.
      obs.last_progress = op.last_progress;
      const cudaError_t e = op.done ? cudaEventQuery(op.done) : cudaErrorNotReady;
      if (e == cudaSuccess) {
        obs.event = EventState::done;
      } else if (e != cudaErrorNotReady) {
        obs.event = EventState::error;
        obs.event_error = rf::str(cuda_text(e), " on cuda:", device_);
      }
      if (dropped) {
        // NCCL cannot cut one rank's connections: inject_drop() fails this rank as its
        // own failure (PeerFailed naming it); peers see NCCL's error or time out (D3).
        obs.event = EventState::error;
        obs.event_error = rf::str("connections dropped by inject_drop() on cuda:", device_);
      }
    } else {
      obs.last_progress = now;
    }
    opt.caller_deadline = &op == waiting ? caller_deadline : TimePoint::max();
    const WaitDecision d = decide_wait(op.target, obs, opt);
    switch (d.action) {
      case WaitAction::done:
        finish(op, d);
        pending_.pop_front();
        if (!pending_.empty()) pending_.front()->last_progress = now;
        continue;  // the next one is first now
      case WaitAction::revoke:
        revoke(d);
        return out;
      case WaitAction::fail:
        out.wait_failed = decision_error(d);
        return out;
      case WaitAction::keep_polling:
        out.next_poll = std::min(out.next_poll, d.next_poll);
        ++i;
        break;
    }
  }
  return out;
}

void NcclCommunicator::finish(NcclOp& op, const WaitDecision& d) {
  if (op.host_out) std::memcpy(op.host_out, op.slot.host, op.host_out_bytes);
  release_staging(op.slot);
  free_events_.push_back(op.done);
  record_decision(recorder_, op.seq, d);
  op.state = NcclOp::finished;
  cv_.notify_all();
  // Chunk 2 of an all-reduce: on the polling thread, under loop_mu_; the hook may call
  // abort(), abort_failed() and inject_drop(), which take no loop_mu_.
  if (op.hook) on_chunk_(ChunkEvent{generation_, op.target.step, op.target.op, 2});
}

void NcclCommunicator::revoke(const WaitDecision& d) {
  poison_decision_ = d;
  poison_ = decision_error(d);
  DeviceGuard g(device_);
  if (comm_) {
#if RF_NCCL_HAS_REVOKE
    // Revoke stops the in-flight kernels and keeps the communicator, so the next
    // generation can ncclCommShrink it when ranks only left.
    // Non-blocking: the state reads ncclInProgress until the communicator is quiescent
    // (which a stuck kernel ahead of our operation on the stream delays); the next
    // generation's shrink waits for that, nobody here does.
    const ncclResult_t r = ncclCommRevoke(comm_, NCCL_REVOKE_DEFAULT);
    std::clog << "ringfence: NCCL g=" << generation_ << " rank " << rank_ << " cuda:" << device_
              << ": ncclCommRevoke (" << d.error.cause << "): " << nccl_text(comm_, r) << "\n";
    if (r != ncclSuccess && r != ncclInProgress && r != ncclInvalidUsage) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
#else
    std::clog << "ringfence: NCCL g=" << generation_ << " rank " << rank_ << " cuda:" << device_
              << ": ncclCommAbort (" << d.error.cause << "; this NCCL has no ncclCommRevoke)\n";
    ncclCommAbort(comm_);
    comm_ = nullptr;
#endif
  }
  if (d.blame_self)
    std::clog << "ringfence: NCCL g=" << generation_ << " rank " << rank_
              << ": abort_failed(): NCCL cannot tell peers who failed; they see NCCL's error or time out (D3)\n";
  for (auto& p : pending_) {
    p->error = poisoned_error(*p);
    recorder_.fail(p->seq, -1, d.error.peer, d.error.cause);
    // A copy behind a stuck kernel may still use the slot later: never reuse it unless
    // nothing was enqueued or the done event says all of it has run.
    if (p->slot.host) {
      if (!p->enqueued || (p->recorded && cudaEventQuery(p->done) == cudaSuccess)) release_staging(p->slot);
      else leaked_.push_back(p->slot);
    }
    p->state = NcclOp::failed;
  }
  pending_.clear();
  cv_.notify_all();
  // The flight recorder is the post-mortem: dumped once, when the communicator fails.
  if (recorder_path_.empty()) {
    recorder_.dump(std::cerr);
  } else {
    std::ofstream out(recorder_path_, std::ios::app);
    recorder_.dump(out);
  }
}

std::exception_ptr NcclCommunicator::poisoned_error(const NcclOp& op) const {
  WaitDecision d = poison_decision_;
  d.error.collective = op.target.collective;
  d.error.step = static_cast<int64_t>(op.target.step);
  d.error.op = op.target.op;
  if (d.action == WaitAction::fail) d.action = WaitAction::revoke;
  return decision_error(d);
}

void NcclCommunicator::request_abort(const std::string& reason, bool blame_self) {
  {
    std::lock_guard ak(abort_mu_);
    if (!abort_flag_.load(std::memory_order_relaxed)) {
      abort_reason_ = reason;
      abort_blames_self_ = blame_self;
    }
  }
  abort_flag_.store(true, std::memory_order_release);
  cv_.notify_all();  // a missed wake-up costs at most one watchdog period
}

void NcclCommunicator::watchdog_main() {
  std::unique_lock lk(loop_mu_);
  while (!stop_) {
    if (pending_.empty()) {
      cv_.wait(lk);
      continue;
    }
    const PollResult r = poll(nullptr, TimePoint::max());
    cv_.wait_until(lk, std::min(r.next_poll, Clock::now() + kWatchdogPoll));
  }
}

bool NcclWork::test() {
  std::lock_guard lk(comm_->loop_mu());
  if (op_->state == NcclOp::pending) (void)comm_->poll(op_.get(), TimePoint::max());
  if (op_->state == NcclOp::failed) std::rethrow_exception(op_->error);
  return op_->state == NcclOp::finished;
}

void NcclWork::wait(TimePoint deadline) {
  std::unique_lock lk(comm_->loop_mu());
  for (;;) {
    if (op_->state == NcclOp::finished) return;
    if (op_->state == NcclOp::failed) std::rethrow_exception(op_->error);
    const NcclCommunicator::PollResult r = comm_->poll(op_.get(), deadline);
    if (op_->state != NcclOp::pending) continue;
    if (r.wait_failed) std::rethrow_exception(r.wait_failed);
    comm_->cv().wait_until(lk, std::min(r.next_poll, Clock::now() + kWaitPoll));
  }
}

// ---- entry points --------------------------------------------------------------------

std::shared_ptr<Communicator> make_nccl_communicator(const CommOptions& o) {
  if (o.store == nullptr) throw rf::InvalidInput("NCCL backend: no bootstrap store (CommOptions::store is null)");
  if (o.device != Device::cuda) throw rf::InvalidInput("NCCL backend: CommOptions::device must be cuda");
  if (!o.members.empty() && static_cast<int>(o.members.size()) != o.world)
    throw rf::InvalidInput(rf::str("NCCL backend: ", o.members.size(), " members for world ", o.world));
  auto* previous = dynamic_cast<NcclCommunicator*>(o.previous.get());
  auto c = std::make_shared<NcclCommunicator>(o, previous);
  c->start_watchdog();
  return c;
}

void prepare_nccl() {
  static std::once_flag once;
  std::call_once(once, [] {
    int version = 0;
    if (ncclResult_t r = ncclGetVersion(&version); r != ncclSuccess)
      throw rf::Error(rf::str("NCCL backend: ncclGetVersion: ", nccl_text(nullptr, r)));
    // Same major.minor as the header we were built against: the Revoke/Shrink guards
    // above were decided from the header.
    if (version / 100 != NCCL_VERSION_CODE / 100)
      std::clog << "ringfence: NCCL library " << version << " differs from the header's " << NCCL_VERSION_CODE << "\n";
  });
}

}  // namespace rf::comm::nccl

