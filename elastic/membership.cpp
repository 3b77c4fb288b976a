#include "elastic/membership.h"

#include <algorithm>

#include "base/error.h"
#include "base/str.h"
#include "elastic/liveness.h"
#include "elastic/round_decision.h"

namespace rf::elastic {
namespace {

// What every wait query (plan_for, ready_state) answers before it looks at rounds: the
// job is over (Stopped, with its error; Done) or the worker is no longer counted (Fenced).
// One helper so the two queries can never disagree about it. Returns whether q is settled.
template <class Query>
bool settle_wait(Query& q, uint64_t generation, Phase phase, const std::string& error, bool live) {
  q.generation = generation;
  if (phase == Phase::Stopped) q.kind = Query::Stopped, q.error = error;
  else if (phase == Phase::Done) q.kind = Query::Done;
  else if (!live) q.kind = Query::Fenced;
  else return false;
  return true;
}

}  // namespace

Membership::Membership(MembershipOptions options, TimePoint now) : opt_(options) {
  if (opt_.target_world < 1) throw rf::InvalidInput(rf::str("target world size ", opt_.target_world, " must be >= 1"));
  if (opt_.min_world < 1 || opt_.min_world > opt_.target_world)
    throw rf::InvalidInput(rf::str("minimum world size ", opt_.min_world, " must be in [1, ", opt_.target_world, "]"));
  if (opt_.lease <= Duration::zero() || opt_.heartbeat <= Duration::zero() || opt_.heartbeat >= opt_.lease)
    throw rf::InvalidInput("the heartbeat must be positive and shorter than the lease");
  if (opt_.job_id.size() > kMaxJobIdBytes)
    throw rf::InvalidInput(rf::str("the job id is ", opt_.job_id.size(), " bytes, more than ", kMaxJobIdBytes));
  if (opt_.first_generation < 1) throw rf::InvalidInput("the first generation must be >= 1");
  generation_ = opt_.first_generation;
  round_.started = now;
  if (!opt_.previous_members.empty()) {
    // A new leader: its first round recovers the generation that ran under the old one.
    phase_ = Phase::Recovering;
    set_members(opt_.previous_members);  // as during any recovery: the generation being recovered
    for (const auto& m : opt_.previous_members) {
      round_.expected.insert(m.slot);
      prev_slots_.push_back(m.slot);
    }
    in_episode_ = true;
    RecoveryRecord rec;
    rec.cause = Cause::LeaderChanged;
    rec.from_generation = generation_ - 1;
    rec.generation = generation_;
    rec.rounds = 1;
    rec.first_seen = rec.revoked = now;
    recoveries_.push_back(rec);
    last_revoke_cause_ = Cause::LeaderChanged;
    log({TransitionEvent::Revoke, to_string(Cause::LeaderChanged), {}, generation_, -1, now, now,
         rf::str("a new leader continues after generation ", generation_ - 1)});
  }
  round_.forming = opt_.previous_members.empty();
}

Membership::Worker* Membership::live_worker(WorkerId w) {
  auto it = workers_.find(w.slot);
  if (it == workers_.end() || it->second.id != w || !it->second.live) return nullptr;
  return &it->second;
}
const Membership::Worker* Membership::live_worker(WorkerId w) const {
  return const_cast<Membership*>(this)->live_worker(w);
}

bool Membership::in_round(int slot) const {
  return round_.expected.count(slot) || (round_plan_ && round_plan_->find(slot));
}

bool Membership::is_member(WorkerId w) const {
  const auto it = member_index_.find(w.slot);
  return it != member_index_.end() && it->second == w.incarnation;
}

void Membership::set_members(std::vector<WorkerId> m) {
  members_ = std::move(m);
  member_index_.clear();
  for (const auto& w : members_) member_index_[w.slot] = w.incarnation;
}

bool Membership::counted_on(const Worker& w) const {
  if (!w.live || w.left) return false;
  if (phase_ == Phase::Running) return is_member(w.id);
  if (phase_ != Phase::Recovering) return false;
  if (round_.expected.count(w.id.slot)) return true;
  const PlanRank* pr = round_plan_ ? round_plan_->find(w.id.slot) : nullptr;
  return pr && pr->worker == w.id;
}

bool Membership::reconfigure_flag() const {
  // R5: raised while RUNNING below the target world and some joiner waits for a round.
  if (phase_ != Phase::Running || static_cast<int>(members_.size()) >= opt_.target_world) return false;
  for (const auto& [slot, w] : workers_)
    if (w.live && !w.left && w.report_round == 0u) return true;
  return false;
}

int64_t Membership::max_member_step() const {
  int64_t s = -1;
  for (const auto& m : members_)  // members that already left still count: their last step
    if (auto it = workers_.find(m.slot); it != workers_.end() && it->second.id == m)
      s = std::max(s, it->second.step);
  return s;
}

int Membership::live_workers() const {
  int n = 0;
  for (const auto& [slot, w] : workers_) n += (w.live && !w.left);
  return n;
}

std::vector<WorkerId> Membership::standby() const {
  std::vector<WorkerId> out;
  for (const auto& [slot, w] : workers_)
    if (w.live && !w.left && std::find(members_.begin(), members_.end(), w.id) == members_.end())
      out.push_back(w.id);
  return out;
}

// ---------------------------------------------------------------------------------------

JoinResult Membership::join(WorkerId w, TimePoint now) {
  JoinResult r;
  r.generation = generation_;
  r.phase = phase_;
  if (phase_ == Phase::Stopped || phase_ == Phase::Done) {
    r.kind = phase_ == Phase::Done ? Answer::Finished : Answer::Stopped;
    r.reason = phase_ == Phase::Done ? kJobFinishedReason : error_;
    return r;
  }
  if (w.slot < 0 || w.incarnation < 0) {
    r.kind = Answer::Refused;
    r.reason = "slot and incarnation must be >= 0";
    return r;
  }
  auto it = workers_.find(w.slot);
  if (it != workers_.end()) {
    Worker& old = it->second;
    if (old.id.incarnation > w.incarnation) {
      r.kind = Answer::Refused;
      r.reason = rf::str("stale incarnation ", w.incarnation, " of slot ", w.slot, " (incarnation ",
                         old.id.incarnation, " exists)");
      log({TransitionEvent::Refused, "stale_incarnation", w, generation_, -1, now, std::nullopt, r.reason});
      return r;
    }
    if (old.id.incarnation == w.incarnation && old.live && !old.left) {
      r.kind = Answer::Refused;
      r.reason = rf::str("slot ", w.slot, " incarnation ", w.incarnation, " has already joined");
      log({TransitionEvent::Refused, "duplicate", w, generation_, -1, now, std::nullopt, r.reason});
      return r;
    }
    if (old.id.incarnation < w.incarnation && old.live && !old.left) {
      // The launcher restarted the slot, so the old process is gone (D1): fail it first.
      fail(old, Cause::Replaced, now, now, rf::str("slot ", w.slot, " rejoined as incarnation ", w.incarnation));
    }
  }
  Worker nw;
  nw.id = w;
  nw.lease_expiry = now + opt_.lease;
  nw.last_heartbeat = now;
  nw.join_order = join_counter_++;
  workers_[w.slot] = nw;
  ever_joined_.insert({w.slot, w.incarnation});
  r.generation = generation_;
  r.phase = phase_;
  log({TransitionEvent::Join, "", w, generation_, -1, now, std::nullopt, ""});
  return r;
}

HeartbeatResult Membership::heartbeat(WorkerId w, uint64_t worker_generation, int64_t step, TimePoint now,
                                      const Activity& activity) {
  HeartbeatResult r;
  r.generation = generation_;
  r.phase = phase_;
  Worker* wk = live_worker(w);
  if (!wk) {
    r.fenced = true;
    log({TransitionEvent::HeartbeatStale, "unknown_or_evicted", w, worker_generation, step, now, std::nullopt, ""});
    return r;
  }
  wk->lease_expiry = now + opt_.lease;
  wk->last_heartbeat = now;
  wk->step = step;
  wk->seen_generation = std::min(worker_generation, generation_);
  wk->activity = activity;
  wk->activity_at = now;
  r.reconfigure = reconfigure_flag();
  r.stop = stop_flag_;
  r.planned = last_revoke_planned_;
  r.cause = last_revoke_cause_;
  return r;
}

ReportResult Membership::report(WorkerId w, uint64_t round, const StateReport& state, TimePoint now) {
  ReportResult r;
  r.generation = generation_;
  if (phase_ == Phase::Stopped || phase_ == Phase::Done) {
    r.kind = phase_ == Phase::Done ? Answer::Finished : Answer::Stopped;
    r.reason = phase_ == Phase::Done ? kJobFinishedReason : error_;
    return r;
  }
  Worker* wk = live_worker(w);
  if (!wk) {
    r.kind = Answer::Fenced;
    r.reason = "unknown or evicted worker: join again";
    return r;
  }
  if (round > generation_ + 1 || (round == generation_ + 1 && phase_ != Phase::Running)) {
    r.kind = Answer::Refused;
    r.reason = rf::str("round ", round, " is not open (generation ", generation_, ")");
    return r;
  }
  if (phase_ == Phase::Running) {
    const bool member = is_member(w);
    if (round == 0 && !member) {  // a joiner: waits for the next round (R5 flag below)
      const bool was_flagged = reconfigure_flag();
      wk->report = state;
      wk->report_round = 0;
      log({TransitionEvent::Report, "joiner", w, generation_, state.step, now, std::nullopt, "waits for the next round"});
      if (!was_flagged && reconfigure_flag())
        log({TransitionEvent::ReconfigureRequested, "joiner", w, generation_, max_member_step(), now, std::nullopt, ""});
      return r;
    }
    if (round == generation_ + 1 && member) {
      // A member left g: after the step the control block agreed on (planned), or on its
      // own (treated like a failure report, so nobody waits on a silent round).
      const bool planned = reconfigure_flag();
      revoke(planned ? Cause::Reconfigure : Cause::MemberLeftGeneration, w, state.step, now, now, planned,
             planned ? "grow: joiners waiting" : "a member reported for the next generation");
      // fall through: accepted into the new round below
    } else {
      r.kind = Answer::Stale;
      r.reason = rf::str("report for round ", round, " while generation ", generation_, " runs");
      log({TransitionEvent::Stale, "report", w, round, state.step, now, std::nullopt, r.reason});
      return r;
    }
  } else if (round != 0 && round < generation_) {
    r.kind = Answer::Stale;
    r.reason = rf::str("report for round ", round, ", the open round is ", generation_);
    log({TransitionEvent::Stale, "report", w, round, state.step, now, std::nullopt, r.reason});
    return r;
  }
  r.generation = generation_;
  wk->report = state;
  // A report arriving after the plan was made waits for the next round, unless it comes
  // from a rank of that plan (a repeated report must not take it out of its own round).
  const PlanRank* placed = round_plan_ ? round_plan_->find(w.slot) : nullptr;
  wk->report_round = round_plan_ && !(placed && placed->worker == w) ? 0 : generation_;
  log({TransitionEvent::Report, state.has_state ? "state" : "no_state", w, generation_, state.step, now, std::nullopt,
       state.digest});
  try_close_round(now);
  return r;
}

PlanQuery Membership::plan_for(WorkerId w, uint64_t round, bool with_plan) const {
  PlanQuery q;
  const Worker* wk = live_worker(w);
  if (settle_wait(q, generation_, phase_, error_, wk != nullptr)) return q;
  if (phase_ == Phase::Running && round == generation_ && running_plan_ && running_plan_->find(w.slot) &&
      running_plan_->find(w.slot)->worker == w)
    return q.kind = PlanQuery::Ready, q.plan = with_plan ? *running_plan_ : Plan{}, q.plan.generation = running_plan_->generation, q;
  if (wk->report_round == 0u) return q;  // waiting (joiner or standby)
  if (wk->report_round == generation_ && phase_ != Phase::Running) {
    if (round_plan_) {
      if (const PlanRank* pr = round_plan_->find(w.slot); pr && pr->worker == w)
        return q.kind = PlanQuery::Ready, q.plan = with_plan ? *round_plan_ : Plan{}, q.plan.generation = round_plan_->generation, q;
    }
    return q;
  }
  return q.kind = PlanQuery::Revoked, q;  // its report belongs to a revoked round: report again
}

Answer Membership::ready(WorkerId w, uint64_t generation, TimePoint now) {
  Answer a;
  a.generation = generation_;
  if (phase_ == Phase::Stopped || phase_ == Phase::Done) return a.kind = Answer::Stopped, a.reason = error_, a;
  if (!live_worker(w)) return a.kind = Answer::Fenced, a;
  const PlanRank* pr = round_plan_ ? round_plan_->find(w.slot) : nullptr;
  if (phase_ == Phase::Running || generation != generation_ || !pr || !(pr->worker == w)) {
    a.kind = Answer::Stale;
    a.reason = rf::str("ready for generation ", generation, " does not match the open round ", generation_);
    log({TransitionEvent::Stale, "ready", w, generation, -1, now, std::nullopt, a.reason});
    return a;
  }
  round_.ready.insert(w.slot);
  log({TransitionEvent::Ready, "", w, generation_, round_plan_->target_step, now, std::nullopt, ""});
  if (round_.ready.size() == round_plan_->ranks.size()) become_running(now);
  return a;
}

ReadyQuery Membership::ready_state(WorkerId w, uint64_t generation) const {
  ReadyQuery q;
  if (settle_wait(q, generation_, phase_, error_, live_worker(w) != nullptr)) return q;
  if (generation < generation_) return q.kind = ReadyQuery::Revoked, q;
  if (phase_ == Phase::Running && generation == generation_) return q.kind = ReadyQuery::Running, q;
  return q;
}

void Membership::connection_lost(WorkerId w, TimePoint now) {
  Worker* wk = live_worker(w);
  if (!wk) return;
  if (wk->left) {
    wk->live = false;
    return;
  }
  fail(*wk, Cause::ConnectionClosed, now, now, "");
}

Membership::ExitedInfo Membership::process_exited(WorkerId w, int status, TimePoint exited_at, TimePoint now) {
  ExitedInfo info;
  info.registered = ever_joined_.count({w.slot, w.incarnation}) > 0;
  if (auto it = workers_.find(w.slot); it != workers_.end() && it->second.id == w) info.left = it->second.left;
  Worker* wk = live_worker(w);
  if (!wk || wk->left) return info;  // already handled (its connection closed first) or left
  fail(*wk, Cause::ProcessExited, now, exited_at, rf::str("exit status ", status));
  return info;
}

Answer Membership::worker_fatal(WorkerId w, const std::string& error, TimePoint now) {
  Answer a;
  a.generation = generation_;
  if (phase_ == Phase::Stopped || phase_ == Phase::Done) return a.kind = Answer::Stopped, a;
  if (!live_worker(w)) return a.kind = Answer::Fenced, a;
  stop_job(StopCause::WorkerFatal, rf::str("slot ", w.slot, " (incarnation ", w.incarnation, ") cannot run: ", error), now);
  return a;
}

Answer Membership::leave(WorkerId w, TimePoint now, std::optional<int64_t> step) {
  Answer a;
  a.generation = generation_;
  Worker* wk = live_worker(w);
  if (!wk) return a.kind = Answer::Fenced, a;
  if (step) wk->step = std::max(wk->step, *step);
  if (!stop_flag_ && phase_ != Phase::Running && in_round(w.slot)) {
    // Leaving in the middle of a round is a failure of that round.
    fail(*wk, Cause::LeftDuringRecovery, now, now, "");
    return a;
  }
  wk->left = true;
  log({TransitionEvent::Leave, stop_flag_ ? "stop" : "finished", w, generation_, wk->step, now, std::nullopt, ""});
  check_done(now);
  return a;
}

void Membership::phase_timing(WorkerId w, uint64_t generation, RecoveryPhase phase, double ms) {
  if (!live_worker(w)) return;
  for (auto it = recoveries_.rbegin(); it != recoveries_.rend(); ++it)
    if (it->generation == generation) {
      double& slot = it->worker_phase_ms[phase];
      slot = std::max(slot, ms);
      return;
    }
}

void Membership::worker_injected(WorkerId w, uint64_t generation, int64_t step, const std::string& spec,
                                 TimePoint now) {
  // Recorded whoever says it: a fault that fires is a fact for the launcher's report, even
  // from a worker the coordinator no longer counts. The list is bounded (the summary must
  // fit in one frame); every one is logged.
  if (fired_.size() < kMaxFired) fired_.push_back({spec, w, generation, step, now});
  log({TransitionEvent::Injected, "", w, generation, step, now, std::nullopt, spec});
}

void Membership::request_stop(TimePoint now) {
  if (stop_flag_) return;
  stop_flag_ = true;
  log({TransitionEvent::StopRequested, "launcher", {}, generation_, max_member_step(), now, std::nullopt, ""});
  if (phase_ == Phase::Forming || phase_ == Phase::Recovering) {
    // No generation runs, so no control block can carry the flag (R5): end the job now.
    // Every worker still holds a committed state (R1); waiting plans and barriers answer
    // "done" and the workers exit.
    phase_ = Phase::Done;
    log({TransitionEvent::Done, "stop_during_recovery", {}, generation_, -1, now, std::nullopt, ""});
    return;
  }
  check_done(now);
}

void Membership::tick(TimePoint now) {
  if (phase_ == Phase::Stopped || phase_ == Phase::Done) return;
  for (auto& [slot, w] : workers_) {
    if (!w.live || w.left || now < w.lease_expiry) continue;
    // The first heartbeat that did not come is when the hang could first have been seen.
    fail(w, Cause::LeaseExpired, now, w.last_heartbeat + opt_.heartbeat, "");
    if (phase_ == Phase::Stopped) return;
  }
  judge_stuck_members(now);
  if (phase_ == Phase::Recovering && !round_plan_ && now >= round_.started + opt_.report_timeout) {
    const std::set<int> expected = round_.expected;  // fail() revokes and opens a new round
    for (int slot : expected) {
      auto it = workers_.find(slot);
      if (it == workers_.end() || !it->second.live || it->second.report_round == generation_) continue;
      fail(it->second, Cause::ReportTimeout, now, round_.started + opt_.report_timeout, "");
      break;  // the eviction revoked the round: the next one starts its own clock
    }
  }
  try_close_round(now);
  if (round_plan_ && phase_ != Phase::Running && now >= round_.planned_at + opt_.ready_timeout) {
    const std::vector<PlanRank> ranks = round_plan_->ranks;  // fail() may reset the plan
    for (const auto& pr : ranks)
      if (!round_.ready.count(pr.worker.slot))
        if (Worker* wk = live_worker(pr.worker)) {
          fail(*wk, Cause::ReadyTimeout, now, round_.planned_at + opt_.ready_timeout, "");
          if (!round_plan_) break;  // the first eviction revoked the round
        }
  }
}

void Membership::judge_stuck_members(TimePoint now) {
  // Each verdict revokes what the worker belonged to; the others are judged against the
  // round that opens, in which they are still counted on (expected to report).
  for (auto& [slot, w] : workers_) {
    if (!counted_on(w)) continue;
    // Fresh: the heartbeat before last may be late on a loaded machine, one more is not.
    const LivenessVerdict v = judge_activity(now, w.activity, w.activity_at, opt_.wedge_factor, 2 * opt_.heartbeat);
    if (v.kind == LivenessVerdict::Alive || v.kind == LivenessVerdict::Stale) continue;
    fail(w, v.kind == LivenessVerdict::Hung ? Cause::Hung : Cause::Wedged, now, v.first_seen, v.detail);
    if (phase_ == Phase::Stopped || phase_ == Phase::Done) return;
  }
}

}  // namespace rf::elastic
