// A worker's exit and what follows: the decision is restart_policy.h's decide_exit; this
// file reaps, reports the exit to the coordinator, and carries the decision out.
#include <signal.h>
#include <sys/wait.h>

#include <cstdio>
#include <set>

#include "apps/ringfence/job_supervisor.h"
#include "base/str.h"
#include "elastic/error_file.h"

namespace rf::apps {

using namespace rf::elastic;

void Supervisor::reap() {
  int st = 0;
  pid_t pid;
  while ((pid = waitpid(-1, &st, WNOHANG)) > 0)
    if (WorkerProc* w = by_pid(pid)) on_exit(*w, pid, exit_status_of(st));
}

void Supervisor::on_exit(WorkerProc& w, pid_t pid, int code) {
  const int64_t wall = rf::wall_us();
  w.exits.push_back({{"incarnation", w.incarnation}, {"status", code}, {"wall_us", wall}});
  const std::string said = error_dir_.empty() ? "" : take_error_file(error_file(w));
  if (code != 0) w.errors.push_back(said);
  if (!said.empty()) w.exits.back()["error"] = said;
  w.pid = -1;
  ::kill(-pid, SIGKILL);  // anything the worker left behind in its group
  // D1, as seen by the launcher; the reply says what the coordinator knew of it.
  AdminClient::ExitedReply known;
  try {
    known = admin_->exited(w.slot, w.incarnation, code, wall);
  } catch (const rf::Error& e) {
    coord_lost(e.what());
  }
  // It may have left a job now DONE, or STOPPED it (a fatal error it reported, a digest
  // mismatch): the reply's phase says so, the status the error.
  if (code != 0 && !job_over_ && (known.phase == Phase::Done || known.phase == Phase::Stopped)) refresh_phase();
  const bool was_member = w.evicted_finished ? w.evicted_was_member : snap_.members.count({w.slot, w.incarnation}) > 0;
  const ExitDecision d = decide_exit(
      {.slot = w.slot, .incarnation = w.incarnation, .status = code, .registered = known.registered, .left = known.left,
       .start_error_before = w.start_error, .restarts = w.restarts, .errors = w.errors},
      {.ran = snap_.seen, .done = phase_is(Phase::Done), .over = job_over_, .stopping = stopping_,
       .others = others_running(w.slot), .was_member = was_member, .spare_available = spare_available(w)},
      {.max_restarts = opt_.max_restarts, .min_world = opt_.min_world > 0 ? opt_.min_world : opt_.nprocs * opt_.nnodes});
  if (!d.late_failure.empty()) late_failures_.push_back(d.late_failure);
  for (const auto& n : d.notes) note(n);
  w.start_error = d.start_error;
  switch (d.action) {
    case ExitAction::Restart: return restart(w, code, false);
    case ExitAction::RestartHeld: return restart(w, code, true);
    case ExitAction::NoRestartsLeft:
      note(rf::str("slot ", w.slot, " exited with status ", code, " and has no restarts left (--max-restarts ",
                   opt_.max_restarts, ")"));
      break;
    case ExitAction::StopJob:
      if (d.start_failure) start_failure_ = d.start_failure;
      error_ = d.error;
      job_over_ = true;
      kill_all(SIGKILL);
      break;
    case ExitAction::Finished:
    case ExitAction::GoOnWithout: break;
  }
  w.done = true;
}

// Restarts the slot as a new incarnation: at once, or held until the recovery its spare
// joins has completed (release_held).
void Supervisor::restart(WorkerProc& w, int code, bool held) {
  ++w.restarts;
  ++total_restarts_;
  const int finished = w.evicted_finished ? *w.evicted_finished : snap_.finished;
  w.evicted_finished.reset();
  ++w.incarnation;  // comes back as a replacement: same slot, new incarnation
  if (held) {
    w.held = WorkerProc::Held{rf::Clock::now(), finished, std::nullopt};
    note(rf::str("slot ", w.slot, " exited (status ", code, "): a spare takes its place; its restart (incarnation ",
                 w.incarnation, ", the next spare) waits until the recovery has completed"));
    return;
  }
  spawn(w);
  w.spawns.push_back({{"incarnation", w.incarnation}, {"wall_us", rf::wall_us()}, {"reason", "restart"}});
}

// The members the job keeps without `slot`: those of the last RUNNING generation this
// launcher has not given up (another node's count while they were members), or before
// the job first ran, this launcher's other live primaries.
int Supervisor::others_running(int slot) const {
  std::set<int> kept;
  for (const auto& [s, inc] : snap_.members) kept.insert(s);
  for (const auto& w : workers_) {
    if (!snap_.seen && !w.spare && !w.done) kept.insert(w.slot);
    if (w.done) kept.erase(w.slot);
  }
  kept.erase(slot);
  return static_cast<int>(kept.size());
}

// Whether a worker of this node stands by for this failure: alive here and known to the
// coordinator as a standby (registered, not a member of the last RUNNING generation) in
// its last status. A process still starting up (not yet joined; it may never get there)
// is no spare: counting it held the dead slot's restart until --min-world-timeout with
// nobody to fill the hole. Each held restart has claimed one standby already. (The
// status is at most one poll old: a worker that registered since is not counted yet,
// and the slot restarts at once, as without spares.)
bool Supervisor::spare_available(const WorkerProc& dead) const {
  if (opt_.spares == 0 || !snap_.seen || stopping_ || job_over_) return false;
  int standby = 0, held = 0;
  for (const auto& w : workers_) {
    if (&w == &dead) continue;
    if (w.held) ++held;
    else if (w.pid > 0 && standby_.count({w.slot, w.incarnation})) ++standby;
  }
  return standby > held;
}

// Starts the held restarts whose recovery has completed (RUNNING, a step past T), or
// whose spare is gone, or after --min-world-timeout without either (bounded); drops
// them when the job is over.
void Supervisor::release_held(const StatusReply& st) {
  // Held restarts still waiting for their recovery, beyond the standbys left to serve
  // them: a spare counted on is gone (exited, evicted as hung) before it was placed in a
  // running generation, and nobody registered fills that hole unless the slot restarts
  // now (the spare's own restart is still starting up: no spare, see spare_available).
  const int finished_now = st.recoveries;
  int spares_missing = 0;
  for (const auto& w : workers_) {
    if (w.held && finished_now <= w.held->finished) ++spares_missing;
    else if (!w.held && w.pid > 0 && standby_.count({w.slot, w.incarnation})) --spares_missing;
  }
  for (auto& w : workers_) {
    if (!w.held) continue;
    if (stopping_ || job_over_) {
      w.held.reset();
      w.done = true;
      note(rf::str("slot ", w.slot, ": held restart dropped, the job is ending"));
      continue;
    }
    bool next_spare = true;  // it starts after the hole was filled, as the next spare
    const double waited = rf::seconds_since(w.held->since);
    const std::string reason = held_release_reason(w, st, finished_now, spares_missing, next_spare);
    if (job_over_) return;  // the coordinator was lost while asking it for the summary
    if (reason.empty()) continue;
    w.held.reset();
    spawn(w);
    w.spawns.push_back({{"incarnation", w.incarnation}, {"wall_us", rf::wall_us()}, {"reason", reason},
                        {"held_ms", waited * 1000.0}});
    note(rf::str("slot ", w.slot, " restarted (incarnation ", w.incarnation, ")", next_spare ? " as the next spare" : "",
                 " after ", static_cast<long long>(waited * 1000.0), " ms: ", reason));
  }
}

// Why the held restart of `w` starts now ("" : it keeps waiting): decide_held_release's
// decision, with the target step of the finished recovery fetched when it needs it.
std::string Supervisor::held_release_reason(WorkerProc& w, const StatusReply& st, int finished_now, int& spares_missing,
                                            bool& next_spare) {
  const HeldView view{.running = st.phase == Phase::Running, .finished = finished_now, .generation = st.generation,
                      .step = st.step, .spares_missing = spares_missing};
  const Duration timeout = opt_.timing.min_world_timeout;
  HeldDecision d = decide_held_release(rf::Clock::now(), *w.held, view, timeout);
  if (d.action == HeldAction::NeedTarget) {
    SummaryReply summary;
    try {
      summary = admin_->summary();
    } catch (const rf::Error& e) {
      coord_lost(e.what());
      return "";
    }
    for (const auto& r : summary.recoveries)
      if (r.finished) w.held->target = r.target_step;
    if (!w.held->target) return "";
    d = decide_held_release(rf::Clock::now(), *w.held, view, timeout);
  }
  if (d.action != HeldAction::Start) return "";
  if (!d.next_spare) --spares_missing;
  next_spare = d.next_spare;
  return d.reason;
}

}  // namespace rf::apps
