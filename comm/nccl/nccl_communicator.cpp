// The NCCL backend: the wait loop and revocation. The class is in nccl_impl.h, forming and
// teardown in nccl_form.cpp, starting and launching operations in nccl_collectives.cpp.
#include <algorithm>
#include <cstring>
#include <fstream>
#include <iostream>

#include "base/log.h"
#include "comm/nccl/nccl_impl.h"

namespace rf::comm::nccl {

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
      drop_op(*p);
    }
    pending_.clear();
    return out;
  }
  if (pending_.empty()) return out;
  bind_device(device_);
  const TimePoint now = Clock::now();
  if (WaitObservation failed; !advance_launches(failed)) {
    failed.now = now;
    failed.last_progress = pending_.front()->last_progress;
    revoke(decide_wait(pending_.front()->target, failed, WaitOptions{}));
    return out;
  }
  const WaitObservation shared = observe_shared(now);
  WaitOptions opt;
  opt.stall_timeout = stall_timeout();  // read afresh: set_stall_timeout applies now (D3)
  opt.poll_interval = kWaitPoll;
  opt.launch_poll_interval = kLaunchPoll;
  const bool dropped = drop_flag_.load(std::memory_order_acquire);
  for (size_t i = 0; i < pending_.size();) {
    NcclOp& op = *pending_[i];
    WaitObservation obs = shared;
    if (i == 0) {
      // Operations complete in order on our one stream: only the first can be stuck, and
      // the ones behind it have made all the progress they can until it completes.
      obs.last_progress = op.last_progress;
      obs.launched = op.launch == NcclOp::Launch::launched;
      auto query = [&](cudaEvent_t ev, const char* what) {
        const cudaError_t e = cudaEventQuery(ev);
        if (e != cudaSuccess && e != cudaErrorNotReady) {
          obs.event = EventState::error;
          obs.event_error = rf::str(what, ": ", cuda_text(e), " on cuda:", device_);
        }
        return e == cudaSuccess;
      };
      obs.started = op.started == nullptr || query(op.started, "start event");
      if (obs.launched && obs.event != EventState::error && query(op.done, "done event")) obs.event = EventState::done;
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
  // `done` completed, so did everything before it on our stream (and `ready`, which our
  // stream waited for): all three events are free again.
  for (cudaEvent_t* e : {&op.ready, &op.started, &op.done})
    if (*e) free_events_.push_back(std::exchange(*e, nullptr));
  record_decision(recorder_, op.seq, d);
  op.state = NcclOp::finished;
  cv_.notify_all();
  // Chunk 2 of an all-reduce: on the polling thread, under loop_mu_; the hook may call
  // abort(), abort_failed() and inject_drop(), which take no loop_mu_.
  if (op.hook) on_chunk_(ChunkEvent{generation_, op.target.step, op.target.op, 2});
}

void NcclCommunicator::revoke(const WaitDecision& decision) {
  WaitDecision d = decision;
  bind_device(device_);
  // A revocation from elsewhere (abort(): the coordinator's revoke, a peer's report) on a
  // rank whose own GPU never reached the operation: its error says so, so the worker can
  // tell the coordinator it is the one to evict (wait_loop.h, judge_device_stuck).
  if (!d.error.device_stuck && !pending_.empty()) {
    const NcclOp& head = *pending_.front();
    const bool started = head.started == nullptr || cudaEventQuery(head.started) != cudaErrorNotReady;
    const Duration waiting = Clock::now() - head.started_at;
    if (head.started != nullptr && judge_device_stuck(started, waiting, stall_timeout())) {
      d.error.device_stuck = true;
      d.error.cause += rf::str("; gpu_stuck: this rank's GPU has not reached ", head.target.collective, " s=",
                               head.target.step, " op=", head.target.op, " for ",
                               std::chrono::duration<double>(waiting).count(), " s");
    }
  }
  poison_decision_ = d;
  poison_ = decision_error(d);
#if RF_NCCL_HAS_REVOKE
  if (comm_ && !broken_) {
    // Not while a call is launching (nccl_impl.h, "Revocation"): it settles first, bounded,
    // under loop_mu_ (a launch with its connections made at init takes microseconds).
    const bool launching = std::any_of(pending_.begin(), pending_.end(),
                                       [](const auto& p) { return p->launch == NcclOp::Launch::launching; });
    if (launching && settle(comm_, Clock::now() + kLaunchSettleBound, false) == ncclInProgress) {
      rf::log::info("nccl", "g=", generation_, " rank ", rank_, " cuda:", device_, ": not revoked (", d.error.cause,
                    "): a call is still launching after ", std::chrono::milliseconds(kLaunchSettleBound).count(),
                    " ms, and ncclCommRevoke would free NCCL's launch job under it; ncclCommAbort at teardown");
      broken_ = true;
    }
  }
#endif
  if (comm_ && !broken_) {
#if RF_NCCL_HAS_REVOKE
    // Revoke stops the in-flight kernels and keeps the communicator, so the next
    // generation can ncclCommShrink it when the plan says so. Non-blocking: the state reads
    // ncclInProgress until the communicator is quiescent; the next generation's shrink
    // (and can_regroup) waits for that, nobody here does.
    const ncclResult_t r = ncclCommRevoke(comm_, NCCL_REVOKE_DEFAULT);
    rf::log::info("nccl", "g=", generation_, " rank ", rank_, " cuda:", device_, ": ncclCommRevoke (", d.error.cause,
                  "): ", nccl_text(comm_, r));
    // Anything else leaves it only to abort, which the teardown does (bounded), not here.
    if (r != ncclSuccess && r != ncclInProgress) broken_ = true;
#else
    rf::log::info("nccl", "g=", generation_, " rank ", rank_, " cuda:", device_, ": revoked (", d.error.cause,
                  "; this NCCL has no ncclCommRevoke: aborted at teardown)");
    broken_ = true;
#endif
  }
  if (d.blame_self)
    rf::log::info("nccl", "g=", generation_, " rank ", rank_,
                  ": abort_failed(): NCCL cannot tell peers who failed; they see NCCL's error or time out (D3)");
  for (auto& p : pending_) {
    p->error = poisoned_error(*p);
    recorder_.fail(p->seq, -1, d.error.peer, d.error.cause);
    drop_op(*p);
  }
  pending_.clear();
  cv_.notify_all();
  // The flight recorder is the post-mortem: dumped once, when the communicator fails.
  if (recorder_path_.empty()) {
    recorder_.dump(std::cerr);
  } else {
    std::ofstream out(recorder_path_, std::ios::app);
    recorder_.dump(out);
    rf::log::warn("nccl", "g=", generation_, " rank ", rank_, " failed; its flight records: ", recorder_path_);
  }
}

void NcclCommunicator::drop_op(NcclOp& op) {
  // A copy behind a stuck kernel may still use the slot: one that reached our stream goes
  // back to the pool only when the stream gets past it (at teardown, ~NcclCommunicator).
  if (op.slot.host) {
    if (op.on_stream) revoked_slots_.push_back(op.slot);
    else release_staging(op.slot);
    op.slot = {};
  }
  // Events with a record still pending may be destroyed: CUDA frees them once it completes.
  for (cudaEvent_t* e : {&op.ready, &op.started, &op.done})
    if (*e) cudaEventDestroy(std::exchange(*e, nullptr));
  op.state = NcclOp::failed;
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

}  // namespace rf::comm::nccl

