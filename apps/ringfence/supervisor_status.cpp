// The coordinator's status as the launcher follows it: the job's phase, evictions (a worker
// evicted as hung is SIGKILLed before it is replaced), the standbys and members that
// restarts are judged by; and the launcher-side fault specs (at=), timed from the first
// RUNNING generation.
#include <signal.h>

#include <algorithm>

#include "apps/ringfence/job_supervisor.h"
#include "base/str.h"

namespace rf::apps {

using namespace rf::elastic;

void Supervisor::coord_lost(const std::string& why) {
  if (!error_.empty()) return;
  // With replicas, no leader answering may mean the job ended while this launcher was
  // following a lost one: etcd holds the phase the last leader committed.
  if (!opt_.etcd.empty() && admin_ && admin_->committed_phase() == Phase::Done) {
    if (!job_over_) note("no coordinator leads any more; etcd's committed state says the job is DONE");
    last_status_.phase = Phase::Done;
    last_status_.raw["phase"] = to_string(Phase::Done);
    job_over_ = true;
    return;
  }
  error_ = "lost the coordinator: " + why;
  job_over_ = true;
  kill_all(SIGKILL);
}

void Supervisor::poll_status() {
  StatusReply st;
  try {
    st = admin_->status();
  } catch (const rf::Error& e) {
    coord_lost(e.what());
    return;
  }
  take_phase(st);
  if (st.phase == Phase::Running && !running_since_) running_since_ = rf::Clock::now();
  kill_evicted(st);
  standby_.clear();
  for (const auto& w : st.standby) standby_.insert({w.slot, w.incarnation});
  if (st.phase == Phase::Running) {
    snap_.seen = true;
    snap_.members.clear();
    for (const auto& m : st.members) snap_.members.insert({m.slot, m.incarnation});
    snap_.finished = st.recoveries;
  }
  release_held(st);
  status_.update(st.raw, total_restarts_);
}

// Workers evicted as hung (D2) are still alive somewhere: kill them before the
// replacement starts, so two incarnations never run at once.
void Supervisor::kill_evicted(const StatusReply& st) {
  for (const auto& e : st.evicted) {
    WorkerProc* w = by_slot(e.slot);
    const int64_t inc = e.incarnation;
    if (w && w->pid > 0 && w->incarnation == inc && !w->killed_as_hung.count(inc)) {
      w->killed_as_hung.insert(inc);
      // Judged against what ran before the eviction: by the reap, the new generation
      // may already be planned with the spare in it.
      w->evicted_finished = snap_.finished;
      w->evicted_was_member = snap_.members.count({w->slot, inc}) > 0;
      ::kill(-w->pid, SIGKILL);
      note(rf::str("slot ", w->slot, " (incarnation ", inc, ") was evicted as hung: SIGKILL"));
    }
  }
}

void Supervisor::inject_due() {
  // at= counts from the moment the job first runs (generation 1 RUNNING), not from the
  // launch, so a fault lands in training whatever the start-up time was.
  if (!running_since_) return;
  const double t = rf::seconds_since(*running_since_);
  for (size_t i = 0; i < opt_.inject.size(); ++i) {
    const FaultSpec& f = opt_.inject[i];
    if (!f.launcher_side() || fired_.count(i) || t < *f.at_seconds) continue;
    fired_.insert(i);
    WorkerProc* w = by_slot(f.rank);
    if (!w || w->pid <= 0) {
      note(rf::str("inject ", f.to_string(), ": slot ", f.rank, " is not running on this node, skipped"));
      if (w) skipped_[i] = rf::str("slot ", f.rank, " was not running at ", *f.at_seconds, " s");
      continue;
    }
    const int sig = f.kind == FaultKind::Kill ? SIGKILL : SIGSTOP;
    const int64_t wall = rf::wall_us();
    ::kill(-w->pid, sig);
    injected_.push_back({{"spec", f.to_string()}, {"by", "launcher"}, {"slot", w->slot}, {"incarnation", w->incarnation},
                         {"pid", w->pid}, {"signal", sig == SIGKILL ? "SIGKILL" : "SIGSTOP"}, {"wall_us", wall}});
    note(rf::str("inject ", f.to_string(), ": ", sig == SIGKILL ? "SIGKILL" : "SIGSTOP", " to slot ", w->slot,
                 " (pid ", w->pid, ")"));
  }
}

// A status's phase: the job is over when DONE, or STOPPED by the coordinator (its error).
void Supervisor::take_phase(const StatusReply& st) {
  last_status_ = st;
  last_step_ = std::max(last_step_, st.step);
  if (st.phase == Phase::Stopped && !job_over_) {
    job_over_ = true;
    error_ = st.error.value_or("the coordinator stopped the job");
    kill_all(SIGKILL);
  }
  if (st.phase == Phase::Done) job_over_ = true;
}

// The coordinator's phase now, after a worker's non-zero exit was reported: the job may
// be DONE (it left first) or STOPPED (a digest mismatch in the first round, a fatal
// error the worker reported): then nothing is restarted and the job's error is the
// coordinator's.
void Supervisor::refresh_phase() {
  try {
    take_phase(admin_->status());
  } catch (const rf::Error& e) {
    coord_lost(e.what());
  }
}

InjectRecord Supervisor::inject_record() const {
  InjectRecord r;
  for (const auto& w : workers_) r.node_slots.insert(w.slot);
  r.due = fired_;
  r.skipped = skipped_;
  if (running_since_) r.ran_for_s = rf::seconds_since(*running_since_);
  r.last_step = last_step_;
  r.done = phase_is(Phase::Done);
  return r;
}

}  // namespace rf::apps
