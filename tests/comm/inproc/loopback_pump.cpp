// One pass of LoopbackCommunicator's driver (loopback_communicator.h): what may run is
// advanced, D1 and D3 are checked, and a failure poisons the communicator and tells the
// peers through the generation's farewell board.
#include <exception>

#include "base/clock.h"
#include "base/str.h"
#include "tests/comm/inproc/loopback_communicator.h"
#include "tests/comm/inproc/loopback_pending.h"

namespace rf::comm::inproc {

std::exception_ptr LoopbackCommunicator::error_of(Poison kind, const CommErrorInfo& i) {
  switch (kind) {
    case Poison::abort: return std::make_exception_ptr(Aborted(i));
    case Poison::timeout: return std::make_exception_ptr(TimedOut(i));
    case Poison::peer: break;
  }
  return std::make_exception_ptr(PeerFailed(i));
}

bool LoopbackCommunicator::pump() {
  if (poisoned_) return false;
  if (poison_if_signalled(false)) return true;
  bool moved = false;
  for (;;) {
    // What may run now: every point-to-point transfer, and the oldest collective.
    active_.clear();
    {
      std::lock_guard lk(queue_mu_);
      bool collective_seen = false;
      for (const auto& p : queue_) {
        if (p->coll->point_to_point()) {
          active_.push_back(p);
        } else if (!collective_seen) {
          active_.push_back(p);
          collective_seen = true;
        }
      }
    }
    if (active_.empty()) return moved;
    const TimePoint now = Clock::now();
    bool any_finished = false;
    for (const auto& p : active_) {
      const Step step = advance_one(*p, now, moved);
      if (step == Step::poisoned) {
        active_.clear();
        return true;
      }
      any_finished = any_finished || step == Step::finished;
    }
    active_.clear();
    if (!any_finished) return moved;
    hand_back_finished();
    moved = true;  // and start the next collective at once
  }
}

// local_only: only what this rank did to itself (abort, drop, its endpoint killed), which
// the chunk hook may have done in the middle of an advance.
bool LoopbackCommunicator::poison_if_signalled(bool local_only) {
  if (abort_flag_.load(std::memory_order_acquire)) {
    poison_aborted();
    return true;
  }
  CommErrorInfo i;
  std::string cause;
  if (drop_flag_.load(std::memory_order_acquire)) {
    i.peer = rank_;
    i.cause = "transport dropped by inject_drop()";
    poison(Poison::peer, i);
    return true;
  }
  if (transport_.peer_failed(rank_, &cause)) {  // LoopbackNetwork::kill: this process is gone
    i.peer = rank_;
    i.cause = rf::str("this rank's endpoint is gone (", cause, ")");
    poison(Poison::peer, i);
    return true;
  }
  if (local_only) return false;
  // A peer's farewell first: it names the real culprit (or says nobody failed), where a
  // dead endpoint only names itself.
  Farewell f;
  int from = -1;
  if (gen_->heard(rank_, f, from)) {
    if (f.kind == Farewell::Kind::failed) {
      i.peer = f.culprit;
      i.cause = rf::str(f.cause, "; reported by rank ", from);
      poison(Poison::peer, i);
    } else {
      i.cause = rf::str(f.cause, "; relayed by rank ", from);
      poison(Poison::abort, i, &f.cause);
    }
    return true;
  }
  if (transport_.failure_count() == 0) return false;
  for (int peer = 0; peer < world_; ++peer) {  // D1: a dead member dooms every collective
    if (peer == rank_ || !transport_.peer_failed(peer, &i.cause)) continue;
    i.peer = peer;
    poison(Poison::peer, i);
    return true;
  }
  return false;
}

LoopbackCommunicator::Step LoopbackCommunicator::advance_one(Pending& p, TimePoint now, bool& moved) {
  if (!p.running) {
    p.running = true;
    p.last_progress = now;  // D3 counts from when it may run, not from its start
  }
  bool progressed = false;
  const Collective::Context ctx{&transport_, generation(), rank_, &on_chunk_, &abort_flag_};
  try {
    p.finished = p.coll->advance(ctx, progressed);
  } catch (const CommError& e) {
    if (!poison_if_signalled(false)) poison(Poison::peer, e.info());
    return Step::poisoned;
  } catch (const std::exception& e) {  // a chunk hook's error, a tag that does not fit
    CommErrorInfo i;
    i.cause = e.what();
    if (!poison_if_signalled(false)) poison(Poison::peer, i);
    return Step::poisoned;
  }
  // The chunk hook may have aborted or dropped this rank: then this one fails too.
  if (poison_if_signalled(true)) return Step::poisoned;
  if (p.finished) return Step::finished;
  if (progressed) {
    p.last_progress = now;
    moved = true;
    return Step::running;
  }
  const Duration stall = stall_timeout();
  if (now - p.last_progress <= stall) return Step::running;
  CommErrorInfo i;  // D3
  p.coll->waiting_on(i.peer, i.chunk);
  i.cause = rf::str("no progress for ", std::chrono::duration<double>(now - p.last_progress).count(),
                    " s, stall bound ", std::chrono::duration<double>(stall).count(), " s");
  poison(Poison::timeout, i);
  return Step::poisoned;
}

void LoopbackCommunicator::hand_back_finished() {
  std::vector<std::shared_ptr<Pending>> done;
  {
    std::lock_guard lk(queue_mu_);
    for (auto it = queue_.begin(); it != queue_.end();) {
      if ((*it)->finished) {
        done.push_back(std::move(*it));
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& p : done) p->state.store(Pending::kDone, std::memory_order_release);
}

void LoopbackCommunicator::poison_aborted() {
  CommErrorInfo i;
  bool blame_self;
  {
    std::lock_guard ak(abort_mu_);
    i.cause = abort_reason_;
    blame_self = abort_blames_self_;
  }
  const std::string reason = i.cause;
  poison(Poison::abort, i, blame_self ? nullptr : &reason);
}

void LoopbackCommunicator::poison(Poison kind, CommErrorInfo info, const std::string* relay_reason) {
  poisoned_ = true;
  // The peers first: they may be waiting on this rank right now.
  if (relay_reason) {
    gen_->say(rank_, {Farewell::Kind::aborted, -1, *relay_reason});
  } else {
    const bool aborted = kind == Poison::abort;
    gen_->say(rank_, {Farewell::Kind::failed, aborted || info.peer < 0 ? rank_ : info.peer,
                      aborted ? rf::str("rank ", rank_, " aborted: ", info.cause) : info.cause});
  }
  transport_.shut_down_transfers();
  std::deque<std::shared_ptr<Pending>> failed;
  {
    std::lock_guard lk(queue_mu_);
    failed.swap(queue_);
    failed_ = true;
    poison_kind_ = kind;
    poison_info_ = info;
  }
  // No buffer of theirs is touched once they are quiet (a shut-down endpoint's receives
  // end at their next test, so this takes one or two passes).
  const TimePoint until = Clock::now() + std::chrono::milliseconds(100);
  for (bool quiet = false; !quiet && Clock::now() < until;) {
    quiet = true;
    for (auto& p : failed) quiet = p->coll->quiesce(transport_) && quiet;
  }
  bool first = true;  // only the running one was inside a chunk
  for (auto& p : failed) {
    CommErrorInfo i = info;
    i.rank = rank_;
    i.generation = static_cast<int64_t>(generation());
    i.collective = p->coll->name();
    i.step = static_cast<int64_t>(p->coll->id().step);
    i.op = p->coll->id().op;
    if (!first) {
      i.chunk = -1;
    } else if (i.chunk < 0 && kind != Poison::timeout) {
      int peer;
      p->coll->waiting_on(peer, i.chunk);
    }
    first = false;
    p->error = error_of(kind, i);
    p->state.store(Pending::kFailed, std::memory_order_release);
  }
}

}  // namespace rf::comm::inproc
