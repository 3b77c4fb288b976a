#include "apps/ringfence/restart_policy.h"

#include <cctype>

#include "base/str.h"

namespace rf::apps {

const char* to_string(RestartAction a) { return name_of(kRestartActionNames, a); }

std::string error_signature(const std::string& error) {
  std::string out;
  for (size_t i = 0; i < error.size(); ++i) {
    if (std::isdigit(static_cast<unsigned char>(error[i]))) {
      if (out.empty() || out.back() != '#') out.push_back('#');
    } else {
      out.push_back(error[i]);
    }
  }
  return out;
}

RestartDecision decide_restart(const RestartInput& in) {
  const size_t n = in.errors.size();
  const size_t same_needed = kSameErrorRestarts + 1;  // the first failure and each restart's
  bool same = n >= same_needed && !in.errors.back().empty();
  for (size_t i = n - std::min(n, same_needed); same && i < n; ++i)
    same = error_signature(in.errors[i]) == error_signature(in.errors.back());
  if (same) {
    const std::string what =
        rf::str("slot ", in.slot, " failed with the same error after each of ", kSameErrorRestarts, " restarts: ",
                in.errors.back());
    if (in.others >= in.min_world)
      return {RestartAction::GoOnWithout,
              rf::str(what, " -- not restarted again; the job goes on without it (", in.others, " member(s), --min-world ",
                      in.min_world, ")")};
    return {RestartAction::StopJob, rf::str(what, " -- not restarted again, the job stops (without it ", in.others,
                                            " member(s), fewer than --min-world ", in.min_world, ")")};
  }
  if (in.restarts >= in.max_restarts) return {RestartAction::NoRestartsLeft, ""};
  return {RestartAction::Restart, ""};
}

}  // namespace rf::apps

namespace rf::apps {

const char* to_string(ExitAction a) { return name_of(kExitActionNames, a); }

namespace {

std::string who(const WorkerExit& e) {
  return rf::str("slot ", e.slot, " (incarnation ", e.incarnation, ") exited with status ", e.status);
}

// Before the job first ran, a worker that never reached the coordinator (its join was never
// accepted). Killed by a signal (the OOM killer, a `kill -9` while it started), it crashed
// like any other worker: restarted. An error status may be a program that cannot start (a
// bad flag, a missing file), which fails the same way every time: it is restarted once, and
// the next incarnation of the slot failing the same way ends the job with its own status.
// Returns whether the job ends.
bool judge_start_failure(const WorkerExit& e, const JobView& job, const RestartOptions& o, ExitDecision& d) {
  d.start_error = !job.ran && !e.registered && e.status > 0;
  if (d.start_error && (e.start_error_before || e.restarts >= o.max_restarts)) {
    d.action = ExitAction::StopJob;
    d.start_failure = e.status;
    d.error = rf::str(who(e), " before it registered with the coordinator",
                      e.start_error_before ? rf::str(", as incarnation ", e.incarnation - 1, " did")
                                           : rf::str(" and has no restarts left (--max-restarts ", o.max_restarts, ")"),
                      ": not restarted, the job ends (its output above says why)");
    return true;
  }
  if (d.start_error)
    d.notes.push_back(rf::str(who(e), " before it registered with the coordinator: restarted once (the same again ends the job)"));
  else if (!job.ran && !e.registered && e.restarts < o.max_restarts)
    d.notes.push_back(rf::str("slot ", e.slot, " (incarnation ", e.incarnation, ") was killed by signal ", -e.status,
                              " before it registered with the coordinator: restarted"));
  return false;
}

}  // namespace

ExitDecision decide_exit(const WorkerExit& e, const JobView& job, const RestartOptions& o) {
  ExitDecision d;
  if (e.status != 0 && job.done) {
    // Every member had left: nothing to restart, but the job's end was not clean.
    d.late_failure = rf::str(who(e), " after the job was DONE");
    d.notes.push_back(d.late_failure);
  } else if (e.status != 0 && e.left && !job.over) {
    // It had left the job (finished its steps, or stopped) and failed afterwards: the job no
    // longer counts on it, and a restart would join a job it already finished.
    d.late_failure = rf::str(who(e), " after it left the job");
    d.notes.push_back(d.late_failure + ": not restarted");
    return d;
  }
  if (e.status == 0 || job.stopping || job.over) return d;
  if (judge_start_failure(e, job, o, d)) return d;
  const RestartDecision r = decide_restart({.slot = e.slot, .errors = e.errors, .restarts = e.restarts,
                                            .max_restarts = o.max_restarts, .others = job.others, .min_world = o.min_world});
  switch (r.action) {
    case RestartAction::NoRestartsLeft: d.action = ExitAction::NoRestartsLeft; return d;
    case RestartAction::GoOnWithout:
      d.action = ExitAction::GoOnWithout;
      d.notes.push_back(r.reason);
      return d;
    case RestartAction::StopJob:
      d.action = ExitAction::StopJob;
      d.error = r.reason;
      return d;
    case RestartAction::Restart: break;
  }
  d.action = job.was_member && job.spare_available ? ExitAction::RestartHeld : ExitAction::Restart;
  return d;
}

const char* to_string(HeldAction a) { return name_of(kHeldActionNames, a); }

HeldDecision decide_held_release(TimePoint now, const HeldRestart& held, const HeldView& view,
                                 Duration min_world_timeout) {
  HeldDecision d;
  if (view.running && view.finished > held.finished) {
    if (!held.target) {
      d.action = HeldAction::NeedTarget;
    } else if (view.step > *held.target) {
      d.action = HeldAction::Start;
      d.reason = rf::str("recovery to generation ", view.generation, " completed (T ", *held.target, ", step ",
                         view.step, " done)");
    }
    return d;
  }
  if (view.spares_missing > 0 && view.finished <= held.finished) {
    d.action = HeldAction::Start;
    d.next_spare = false;
    d.reason = "the spare it waited for is gone before the recovery completed";
  } else if (now - held.since >= min_world_timeout) {
    d.action = HeldAction::Start;
    d.reason = "no completed recovery within --min-world-timeout";
  }
  return d;
}

}  // namespace rf::apps
