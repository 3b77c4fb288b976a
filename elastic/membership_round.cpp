// Membership's rounds (elastic/membership.h): failures (a worker gone, a failure report)
// revoking a generation into the next round, closing a round into a plan, the plan
// becoming RUNNING, and the job's ends.
#include "elastic/membership.h"

#include "base/str.h"
#include "elastic/round_decision.h"

namespace rf::elastic {

Answer Membership::failure_report(WorkerId reporter, uint64_t generation, int64_t step, std::optional<int> peer_slot,
                                  const std::string& cause, TimePoint now, FailureKind kind) {
  Answer a;
  a.generation = generation_;
  if (phase_ == Phase::Stopped || phase_ == Phase::Done) return a.kind = Answer::Stopped, a;
  Worker* wk = live_worker(reporter);
  if (!wk) return a.kind = Answer::Fenced, a;
  const bool stuck = kind == FailureKind::gpu_stuck;
  const std::string detail = stuck ? rf::str("slot ", reporter.slot, " says its GPU is stuck: ", cause)
                                   : rf::str("reported by slot ", reporter.slot, ": ", cause);
  // The peers' reports (naming nobody) may have opened this round before the stuck
  // member's own report of the generation they all failed in.
  if (stuck && generation < generation_ && evict_stuck_from_round(*wk, now, detail)) return a;
  if (generation != generation_) {
    // A failure of an older generation is already handled; acting on it would revoke
    // the new generation for nothing.
    a.kind = Answer::Stale;
    a.reason = rf::str("failure report for generation ", generation, ", current is ", generation_);
    log({TransitionEvent::Stale, "failure_report", reporter, generation, step, now, std::nullopt, detail});
    return a;
  }
  if (stuck && (phase_ == Phase::Running ? is_member(reporter) && !wk->left : in_round(reporter.slot))) {
    fail(*wk, Cause::GpuStuck, now, now, detail);  // evicted, and what it belongs to revoked
    return a;
  }
  WorkerId who = reporter;
  if (peer_slot) {
    auto it = workers_.find(*peer_slot);
    who = it != workers_.end() ? it->second.id : WorkerId{*peer_slot, -1};
  }
  if (phase_ == Phase::Running || in_round(reporter.slot) || (peer_slot && in_round(*peer_slot)))
    revoke(Cause::FailureReport, who, step, now, now, false, detail);
  return a;
}

bool Membership::evict_stuck_from_round(Worker& w, TimePoint now, const std::string& detail) {
  if (phase_ == Phase::Running || !round_.expected.count(w.id.slot)) return false;
  const PlanRank* placed = round_plan_ ? round_plan_->find(w.id.slot) : nullptr;
  if (placed && placed->worker == w.id) {
    fail(w, Cause::GpuStuck, now, now, detail);  // the plan counts on it: revoked again
    return true;
  }
  // Nothing of the round refers to it yet (no plan places it): it leaves the round's
  // expected set, evicted, and the round goes on (it may close now) without a revocation.
  w.live = false;
  w.report.reset();
  w.report_round.reset();
  evictions_.push_back(w.id);
  log({TransitionEvent::Evict, to_string(Cause::GpuStuck), w.id, generation_, w.step, now, now, detail});
  round_.expected.erase(w.id.slot);
  // The round was opened by reports naming nobody (a stuck GPU looks like a peer waiting in
  // a collective): this recovery's cause and culprit are the stuck member.
  if (in_episode_ && recoveries_.back().cause == Cause::FailureReport) {
    recoveries_.back().cause = Cause::GpuStuck;
    recoveries_.back().worker = w.id;
  }
  try_close_round(now);
  return true;
}

void Membership::fail(Worker& w, Cause cause, TimePoint now, TimePoint first_seen, const std::string& detail) {
  w.live = false;
  w.report.reset();
  w.report_round.reset();
  if (evicts(cause)) evictions_.push_back(w.id);
  log({evicts(cause) ? TransitionEvent::Evict : TransitionEvent::Fail, to_string(cause), w.id, generation_, w.step, now, first_seen, detail});
  if (phase_ == Phase::Stopped || phase_ == Phase::Done) return;
  const bool member = is_member(w.id);
  if (phase_ == Phase::Running) {
    if (member) revoke(cause, w.id, w.step, now, first_seen, false, detail);
    else check_done(now);
    return;
  }
  // FORMING / RECOVERING: a participant of the round failing revokes it (g+1 -> g+2);
  // a joiner that was not yet placed just drops out.
  if (in_round(w.id.slot)) revoke(cause, w.id, w.step, now, first_seen, false, detail);
}

void Membership::revoke(Cause cause, WorkerId who, int64_t step, TimePoint now, TimePoint first_seen, bool planned,
                        const std::string& detail) {
  std::set<int> expected;
  if (phase_ == Phase::Running) {
    for (const auto& m : members_)
      if (auto* wk = live_worker(m); wk && !wk->left) expected.insert(m.slot);
  } else {
    for (int slot : round_.expected)
      if (auto it = workers_.find(slot); it != workers_.end() && it->second.live) expected.insert(slot);
    if (round_plan_)
      for (const auto& pr : round_plan_->ranks)
        if (live_worker(pr.worker)) expected.insert(pr.worker.slot);
  }
  const uint64_t from = phase_ == Phase::Running ? generation_ : generation_ - 1;
  const bool forming = phase_ != Phase::Running && round_.forming;
  if (!in_episode_ && !forming) {  // the first round is not a recovery
    in_episode_ = true;
    RecoveryRecord rec;
    rec.cause = cause;
    rec.worker = who;
    rec.planned = planned;
    rec.from_generation = from;
    rec.first_seen = first_seen;
    rec.revoked = now;
    recoveries_.push_back(rec);
  }
  if (in_episode_) recoveries_.back().rounds++, recoveries_.back().generation = generation_ + 1;
  ++generation_;  // generations only grow; a number is never reused
  phase_ = Phase::Recovering;
  round_ = Round{};
  round_.expected = std::move(expected);
  round_.started = now;
  round_.forming = forming;
  round_plan_.reset();
  last_revoke_planned_ = planned;
  last_revoke_cause_ = cause;
  // Every report of the revoked round is void (a receiver may have swapped in new state);
  // joiners still waiting keep their report, since they have not changed.
  for (auto& [slot, w] : workers_)
    if (w.report_round && *w.report_round != 0) w.report_round.reset(), w.report.reset();
  for (auto& [slot, w] : workers_)
    if (w.live && w.report_round == 0u) w.report_round = generation_;
  log({TransitionEvent::Revoke, to_string(cause), who, generation_, step, now, first_seen, detail});
}

void Membership::try_close_round(TimePoint now) {
  if ((phase_ != Phase::Forming && phase_ != Phase::Recovering) || round_plan_) return;
  std::vector<Reporter> reporters;
  RoundView view;
  view.generation = generation_;
  view.forming = round_.forming;
  view.started = round_.started;
  for (const auto& [slot, w] : workers_)
    if (w.live && !w.left && w.report_round == generation_) {
      reporters.push_back({w.id, *w.report, w.join_order});
      view.primaries_reported += w.id.slot < opt_.target_world;
    }
  view.reported = static_cast<int>(reporters.size());
  for (int slot : round_.expected) {
    auto it = workers_.find(slot);
    view.members_missing += it != workers_.end() && it->second.live && it->second.report_round != generation_;
  }
  const RoundDecision d = decide_round(now, view, opt_);
  if (d.kind == RoundDecision::Stop) stop_job(StopCause::BelowMinWorld, d.error, now);
  if (d.kind != RoundDecision::Close) return;
  std::vector<int> prev = round_.forming ? std::vector<int>{} : prev_slots_;
  PlanOutcome out = make_plan(generation_, prev, reporters, opt_.target_world);
  if (!out.plan) {
    stop_job(StopCause::DigestMismatch, out.error, now);
    return;
  }
  round_plan_ = std::move(out.plan);
  round_plan_->job_id = opt_.job_id;
  // Nobody holds state although a generation already ran (running_plan_ is set): every
  // worker that held state is gone (docs/protocol.md "Whole-job failure").
  round_plan_->whole_job_restart = round_plan_->fresh_start && running_plan_.has_value();
  // Shrink or afresh, for every rank alike: members_ and running_plan_ are still those of
  // the last generation that ran (a new leader's first round knows no such generation).
  const uint64_t last_ran = !round_.forming && running_plan_ ? running_plan_->generation : 0;
  round_plan_->shrink_from = decide_shrink_from(last_ran, members_, *round_plan_);
  round_.planned_at = now;
  for (auto& [slot, w] : workers_)  // reporters left out stay standby for the next round
    if (w.report_round == generation_ && !round_plan_->find(slot)) w.report_round = 0;
  if (in_episode_) {
    recoveries_.back().planned_at = now;
    recoveries_.back().whole_job_restart |= round_plan_->whole_job_restart;
  }
  log({TransitionEvent::Plan, round_.forming ? "forming" : "recovery", {}, generation_, round_plan_->target_step, now, std::nullopt,
       rf::str("world ", round_plan_->world(), ", T ", round_plan_->target_step,
               round_plan_->shrink_from ? rf::str(", shrinks generation ", round_plan_->shrink_from) : "",
               round_plan_->whole_job_restart ? ", whole-job restart (every worker that held state is gone)" : "")});
}

void Membership::become_running(TimePoint now) {
  phase_ = Phase::Running;
  std::vector<WorkerId> members;
  prev_slots_.clear();
  for (const auto& pr : round_plan_->ranks) {
    members.push_back(pr.worker);
    prev_slots_.push_back(pr.worker.slot);
    if (Worker* wk = live_worker(pr.worker)) {
      wk->report.reset();
      wk->report_round.reset();
      wk->step = round_plan_->target_step;
    }
  }
  set_members(std::move(members));
  if (in_episode_) {
    RecoveryRecord& rec = recoveries_.back();
    rec.generation = generation_;
    rec.running_at = now;
    rec.finished = true;
    rec.target_step = round_plan_->target_step;
    rec.world = round_plan_->world();
    in_episode_ = false;
  }
  running_plan_ = std::move(round_plan_);
  round_plan_.reset();
  log({TransitionEvent::Running, "", {}, generation_, running_plan_->target_step, now, std::nullopt,
       rf::str("world ", running_plan_->world())});
  check_done(now);
}

void Membership::stop_job(StopCause cause, const std::string& error, TimePoint now) {
  phase_ = Phase::Stopped;
  error_ = error;
  log({TransitionEvent::Stop, to_string(cause), {}, generation_, -1, now, std::nullopt, error});
}

void Membership::check_done(TimePoint now) {
  if (phase_ != Phase::Running || members_.empty()) return;
  for (const auto& m : members_) {
    auto it = workers_.find(m.slot);
    if (it != workers_.end() && it->second.id == m && it->second.live && !it->second.left) return;
  }
  // Every member left; done only if they left on purpose (the failure path revokes
  // before we get here, so a member that crashed never counts).
  bool any_left = false;
  for (const auto& m : members_)
    if (auto it = workers_.find(m.slot); it != workers_.end() && it->second.id == m && it->second.left) any_left = true;
  if (!any_left) return;
  phase_ = Phase::Done;
  log({TransitionEvent::Done, stop_flag_ ? "stop" : "finished", {}, generation_, -1, now, std::nullopt, ""});
}

}  // namespace rf::elastic
