#include "elastic/membership_types.h"

namespace rf::elastic {

const char* to_string(Cause c) {
  switch (c) {
    case Cause::ConnectionClosed: return "connection_closed";
    case Cause::ProcessExited: return "process_exited";
    case Cause::Replaced: return "replaced";
    case Cause::LeaseExpired: return "lease_expired";
    case Cause::Hung: return "hung";
    case Cause::Wedged: return "wedged";
    case Cause::ReportTimeout: return "report_timeout";
    case Cause::ReadyTimeout: return "ready_timeout";
    case Cause::LeftDuringRecovery: return "left_during_recovery";
    case Cause::FailureReport: return "failure_report";
    case Cause::MemberLeftGeneration: return "member_left_generation";
    case Cause::Reconfigure: return "reconfigure";
    case Cause::LeaderChanged: return "leader_changed";
    case Cause::GpuStuck: return "gpu_stuck";
  }
  return "?";
}

std::optional<Cause> parse_cause(const std::string& text) {
  for (Cause c : kCauses)
    if (text == to_string(c)) return c;
  return std::nullopt;
}

const char* to_string(RecoveryPhase p) {
  switch (p) {
    case RecoveryPhase::Connect: return "connect";
    case RecoveryPhase::Transfer: return "transfer";
    case RecoveryPhase::Verify: return "verify";
  }
  return "?";
}

std::optional<RecoveryPhase> parse_recovery_phase(const std::string& text) {
  for (RecoveryPhase p : kRecoveryPhases)
    if (text == to_string(p)) return p;
  return std::nullopt;
}

bool evicts(Cause c) {
  return c == Cause::LeaseExpired || c == Cause::Hung || c == Cause::Wedged || c == Cause::ReportTimeout ||
         c == Cause::ReadyTimeout || c == Cause::GpuStuck;
}

const char* to_string(StopCause c) {
  switch (c) {
    case StopCause::BelowMinWorld: return "below_min_world";
    case StopCause::DigestMismatch: return "digest_mismatch";
    case StopCause::WorkerFatal: return "worker_fatal";
  }
  return "?";
}

const char* to_string(Activity::Kind k) {
  switch (k) {
    case Activity::Idle: return "idle";
    case Activity::Compute: return "compute";
    case Activity::Wait: return "wait";
  }
  return "?";
}

std::optional<Activity::Kind> parse_activity_kind(const std::string& text) {
  for (Activity::Kind k : {Activity::Idle, Activity::Compute, Activity::Wait})
    if (text == to_string(k)) return k;
  return std::nullopt;
}

const char* to_string(Phase p) {
  switch (p) {
    case Phase::Forming: return "FORMING";
    case Phase::Running: return "RUNNING";
    case Phase::Recovering: return "RECOVERING";
    case Phase::Stopped: return "STOPPED";
    case Phase::Done: return "DONE";
  }
  return "?";
}

std::optional<Phase> parse_phase(const std::string& text) {
  for (Phase p : {Phase::Forming, Phase::Running, Phase::Recovering, Phase::Stopped, Phase::Done})
    if (text == to_string(p)) return p;
  return std::nullopt;
}

const char* to_string(TransitionEvent e) {
  switch (e) {
    case TransitionEvent::Join: return "join";
    case TransitionEvent::Refused: return "refused";
    case TransitionEvent::HeartbeatStale: return "heartbeat_stale";
    case TransitionEvent::Fail: return "fail";
    case TransitionEvent::Evict: return "evict";
    case TransitionEvent::Revoke: return "revoke";
    case TransitionEvent::Report: return "report";
    case TransitionEvent::Stale: return "stale";
    case TransitionEvent::Plan: return "plan";
    case TransitionEvent::Ready: return "ready";
    case TransitionEvent::Running: return "running";
    case TransitionEvent::ReconfigureRequested: return "reconfigure_requested";
    case TransitionEvent::StopRequested: return "stop_requested";
    case TransitionEvent::Leave: return "leave";
    case TransitionEvent::Injected: return "injected";
    case TransitionEvent::Stop: return "stop";
    case TransitionEvent::Done: return "done";
  }
  return "?";
}

std::optional<TransitionEvent> parse_transition_event(const std::string& text) {
  for (TransitionEvent e : kTransitionEvents)
    if (text == to_string(e)) return e;
  return std::nullopt;
}

const char* to_string(Answer::Kind k) {
  switch (k) {
    case Answer::Accepted: return "accepted";
    case Answer::Stale: return "stale";
    case Answer::Fenced: return "fenced";
    case Answer::Refused: return "refused";
    case Answer::Stopped: return "stopped";
    case Answer::Finished: return "finished";
  }
  return "?";
}

std::optional<Answer::Kind> parse_answer_kind(const std::string& text) {
  for (Answer::Kind k : {Answer::Accepted, Answer::Stale, Answer::Fenced, Answer::Refused, Answer::Stopped,
                         Answer::Finished})
    if (text == to_string(k)) return k;
  return std::nullopt;
}

const char* to_string(PlanQuery::Kind k) {
  switch (k) {
    case PlanQuery::Pending: return "pending";
    case PlanQuery::Ready: return "plan";
    case PlanQuery::Revoked: return "revoked";
    case PlanQuery::Fenced: return "fenced";
    case PlanQuery::Stopped: return "stopped";
    case PlanQuery::Done: return "done";
  }
  return "?";
}

const char* to_string(ReadyQuery::Kind k) {
  switch (k) {
    case ReadyQuery::Pending: return "pending";
    case ReadyQuery::Running: return "running";
    case ReadyQuery::Revoked: return "revoked";
    case ReadyQuery::Fenced: return "fenced";
    case ReadyQuery::Stopped: return "stopped";
    case ReadyQuery::Done: return "done";
  }
  return "?";
}

}  // namespace rf::elastic
