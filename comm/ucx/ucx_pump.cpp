// UcxCommunicator's driver (ucx_communicator.h): pump() advances every running collective
// by one pass, the farewells tell peers why this rank leaves a generation, and poison()
// fails what is pending once a generation is over.
#include <cstring>
#include <fstream>
#include <iostream>

#include "base/log.h"
#include "base/str.h"
#include "comm/shm/shm_session.h"
#include "comm/tag.h"
#include "comm/ucx/ucx_pending.h"
#include "comm/ucx/ucx_transport.h"

namespace rf::comm {

using namespace ucx_detail;

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
      poison(PoisonKind::peer, i);
      return true;
    }
  }
  if (aborted_by < 0) return false;
  const Farewell& f = farewell_in_[aborted_by];
  const std::string reason(f.cause, strnlen(f.cause, sizeof(f.cause)));
  CommErrorInfo i;  // peer -1: nobody failed
  i.cause = rf::str(reason, "; relayed by rank ", aborted_by);
  poison(PoisonKind::abort, i, &reason);  // and relay the bare reason to the peers not told yet
  return true;
}

const char* to_string(PoisonKind kind) { return name_of(kPoisonKindNames, kind); }

bool UcxCommunicator::pump() {
  if (poisoned_) {
    drop_flag_.store(false, std::memory_order_relaxed);  // nothing left to drop
    return false;
  }
  if (poison_if_aborted_or_dropped()) return true;
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
  // idle pump costs the small all-reduce. Every 64th pump looks anyway.
  if (++farewell_countdown_ >= 64 || events > 0) {
    farewell_countdown_ = 0;
    if (check_farewells()) return true;
  }
  if (check_dead_peers()) return true;
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
      const Step step = advance_one(*p, check_stall, now, moved);
      if (step == Step::poisoned) return true;
      any_finished = any_finished || step == Step::finished;
    }
    single_copy_reads_.store(transport_->single_copy_reads(), std::memory_order_relaxed);
    if (!any_finished) return moved;
    hand_back_finished();
    moved = true;  // and go on with the next collective at once
  }
}

bool UcxCommunicator::poison_if_aborted_or_dropped() {
  if (abort_flag_.load(std::memory_order_acquire)) {
    poison_aborted();
    return true;
  }
  // A plain load first: an atomic exchange on every pump costs the small all-reduce.
  if (drop_flag_.load(std::memory_order_relaxed) && drop_flag_.exchange(false, std::memory_order_acq_rel)) {
    CommErrorInfo i;
    i.peer = rank_;
    i.cause = "transport dropped by inject_drop()";
    poison(PoisonKind::peer, i);
    return true;
  }
  return false;
}

// D1: any dead member dooms every collective of this generation, not only the ones that
// talk to it directly. But UCX may report a peer's endpoint error (its close, its exit)
// before it hands us messages that peer sent ahead of it: its goodbye (it left in order, no
// failure), a "failed" farewell naming the real culprit, or an "aborted" one (it was
// revoked: nobody to blame, least of all that peer). A peer closes its endpoints only after
// its farewell sends completed, so those messages are already in our receive queues: drain
// them (bounded: until UCX has no more events) and read the farewells once more before
// blaming anyone. Without that, a rank still in a final barrier can blame a peer that
// finished it and said goodbye.
bool UcxCommunicator::check_dead_peers() {
  if (transport_->failure_count() == departed_count_) return false;
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
    poison(PoisonKind::peer, i);
    return true;
  }
  return false;
}

UcxCommunicator::Step UcxCommunicator::advance_one(Pending& p, bool check_stall, TimePoint now, bool& moved) {
  if (!p.running) {
    p.running = true;
    p.progress_seen = true;  // the next stall check starts its clock (no read here)
  }
  bool progressed = false;
  try {
    p.finished = p.coll->advance({transport_.get(), generation_, rank_, &opt_.on_chunk, &abort_flag_}, progressed);
  } catch (const CommError& e) {
    // A transfer failed because a peer is gone (e.g. a single-copy read from a rank that
    // exited after failing itself, or that released its buffers on an abort). If that peer
    // said why in a farewell already on its way (poison() sends it before releasing
    // anything), its culprit or its abort is the truth: read everything UCX already holds
    // (one progress call may stop short of it) and look once more before blaming.
    for (int n = 0; n < 256 && transport_->progress() > 0; ++n) {
    }
    if (check_farewells()) return Step::poisoned;
    poison(PoisonKind::peer, e.info());
    return Step::poisoned;
  } catch (const rf::Error& e) {
    CommErrorInfo i;
    i.cause = e.what();
    poison(PoisonKind::peer, i);
    return Step::poisoned;
  }
  if (p.finished) return Step::finished;
  if (progressed) {
    p.progress_seen = true;
    moved = true;
  }
  if (!check_stall) return Step::running;
  if (p.progress_seen) {
    p.progress_seen = false;
    p.last_progress = now;
    return Step::running;
  }
  if (now - p.last_progress <= stall_bound(p)) return Step::running;
  fail_stalled(p, now);  // D3
  return Step::poisoned;
}

Duration UcxCommunicator::stall_bound(const Pending& p) const {
  return p.stall_bound > Duration::zero() ? p.stall_bound : stall_timeout();
}

void UcxCommunicator::fail_stalled(Pending& p, TimePoint now) {
  const Duration stall = stall_bound(p);
  CommErrorInfo i;
  p.coll->waiting_on(i.peer, i.chunk);
  i.collective = p.name;
  i.step = static_cast<int64_t>(p.id.step);
  i.op = p.id.op;
  i.cause = rf::str("no progress for ", std::chrono::duration<double>(now - p.last_progress).count(),
                    " s, stall bound ", std::chrono::duration<double>(stall).count(), " s");
  poison(PoisonKind::timeout, i);
}

// Finished collectives leave the queue (under its lock, with active_ rebuilt under the
// same lock) and are handed back to their callers.
void UcxCommunicator::hand_back_finished() {
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
    rebuild_active();
  }
  for (auto& p : done) {
    recorder_.finish(p->seq, p->coll->last_chunk(), -1);
    p->state.store(ucx_detail::kDone, std::memory_order_release);
  }
  done.clear();
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
  poison(PoisonKind::abort, i, blame_self ? nullptr : &reason);
}

void UcxCommunicator::poison(PoisonKind kind, CommErrorInfo info, const std::string* relay_reason) {
  poisoned_ = true;
  tell_peers(kind, info, relay_reason);
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
  fail_all(failed, kind, info);
  dump_flight_record();
}

// Tells every peer first (they may not see the culprit themselves for a while), and before
// our offered pieces and registered buffers are released: a peer that finds them released
// reads what UCX holds for a farewell of ours before it blames us (pump()), so the
// farewell must already be on its way then.
void UcxCommunicator::tell_peers(PoisonKind kind, const CommErrorInfo& info, const std::string* relay_reason) {
  if (farewell_recv_.empty()) return;
  const TimePoint deadline = Clock::now() + std::chrono::milliseconds(2);
  if (relay_reason) {
    send_farewells(kAborted, -1, *relay_reason, deadline);
    return;
  }
  const bool aborted = kind == PoisonKind::abort;
  send_farewells(kFailed, aborted || info.peer < 0 ? rank_ : info.peer,
                 aborted ? rf::str("rank ", rank_, " aborted: ", info.cause) : info.cause, deadline);
}

// Each failed collective gets its error (only the running one was inside a chunk).
void UcxCommunicator::fail_all(std::deque<std::shared_ptr<Pending>>& failed, PoisonKind kind,
                               const CommErrorInfo& info) {
  bool first = true;
  for (auto& p : failed) {
    CommErrorInfo i = info;
    i.rank = rank_;
    i.generation = static_cast<int64_t>(generation_);
    i.collective = p->name;
    i.step = static_cast<int64_t>(p->id.step);
    i.op = p->id.op;
    if (!first) {
      i.chunk = -1;
    } else if (i.chunk < 0 && kind != PoisonKind::timeout) {
      int peer;
      int64_t chunk;
      p->coll->waiting_on(peer, chunk);
      i.chunk = chunk;
    }
    first = false;
    p->error = make_error(kind, i);
    recorder_.fail(p->seq, i.chunk, i.peer, i.cause);
    if (!p->coll->quiesce(*transport_)) graveyard_.push_back(std::move(p->coll));
    p->state.store(ucx_detail::kFailed, std::memory_order_release);
  }
}

// The flight recorder is the post-mortem: dumped once, when the communicator fails.
void UcxCommunicator::dump_flight_record() {
  if (opt_.flight_recorder_path.empty()) {
    recorder_.dump(std::cerr);
  } else {
    std::ofstream out(opt_.flight_recorder_path, std::ios::app);
    recorder_.dump(out);
    rf::log::warn("comm", "g=", generation_, " rank ", rank_, " failed; its flight records: ", opt_.flight_recorder_path);
  }
}

}  // namespace rf::comm
