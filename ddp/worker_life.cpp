#include "ddp/worker_life.h"

#include <array>

#include "base/enforce.h"

namespace rf::ddp {

namespace {
using S = WorkerState;
using E = WorkerEventKind;
using A = WorkerAction;

struct Row {
  S from;
  E event;
  S to;
  A action;
};

// The table of worker_life.h, row for row.
constexpr std::array kTable{
    Row{S::Joining, E::Joined, S::Reporting, A::Report},
    Row{S::Joining, E::JobFinished, S::Done, A::EndStandby},
    Row{S::Reporting, E::PlanReceived, S::Forming, A::Form},
    Row{S::Reporting, E::Fenced, S::Dropping, A::DropComm},
    Row{S::Reporting, E::JobFinished, S::Done, A::EndStandby},
    Row{S::Forming, E::Formed, S::Resuming, A::Resume},
    Row{S::Forming, E::FormFailed, S::Dropping, A::DropComm},
    Row{S::Resuming, E::Running, S::Training, A::Train},
    Row{S::Resuming, E::Revoked, S::Dropping, A::DropComm},
    Row{S::Resuming, E::JobFinished, S::Done, A::End},
    Row{S::Training, E::StepFailed, S::Dropping, A::DropComm},
    Row{S::Training, E::Revoked, S::Dropping, A::DropComm},
    Row{S::Training, E::Reconfigure, S::Dropping, A::DropComm},
    Row{S::Training, E::StopRequested, S::Leaving, A::Leave},
    Row{S::Training, E::Finished, S::Leaving, A::Leave},
    Row{S::Leaving, E::Left, S::Done, A::End},
    Row{S::Leaving, E::Fenced, S::Dropping, A::DropComm},
    Row{S::Dropping, E::CommDropped, S::Reporting, A::Report},
    Row{S::Dropping, E::Fenced, S::Joining, A::Join},
};
}  // namespace

WorkerTransition next_action(WorkerState state, WorkerEvent event) { return next_action({state, A::Join}, event); }

WorkerTransition next_action(const WorkerTransition& from, WorkerEvent event) {
  // A failed step says why; every other event carries no failure.
  RF_ENFORCE((event.kind == E::StepFailed) == (event.failure != StepFailure::None), "worker event ",
             to_string(event.kind), " with failure ", to_string(event.failure));
  for (const Row& r : kTable) {
    if (r.from != from.state || r.event != event.kind) continue;
    const bool reached_leave = from.reached_leave || r.action == A::Leave;
    // Fenced at the leave, the job finished before this worker could leave again: it
    // trained to the end, it ends as a member.
    const A action = r.action == A::EndStandby && reached_leave ? A::End : r.action;
    return {r.to, action, reached_leave};
  }
  RF_ENFORCE(false, "worker in state ", to_string(from.state), " has no transition on ", to_string(event.kind));
  return {from.state, A::End};  // not reached
}

const char* to_string(WorkerState s) {
  switch (s) {
    case S::Joining: return "joining";
    case S::Reporting: return "reporting";
    case S::Forming: return "forming";
    case S::Resuming: return "resuming";
    case S::Training: return "training";
    case S::Leaving: return "leaving";
    case S::Dropping: return "dropping";
    case S::Done: return "done";
  }
  return "?";
}

const char* to_string(WorkerEventKind e) {
  switch (e) {
    case E::Joined: return "joined";
    case E::JobFinished: return "job finished";
    case E::PlanReceived: return "plan received";
    case E::Fenced: return "fenced";
    case E::Formed: return "formed";
    case E::FormFailed: return "form failed";
    case E::Running: return "running";
    case E::Revoked: return "revoked";
    case E::StepFailed: return "step failed";
    case E::Reconfigure: return "reconfigure";
    case E::StopRequested: return "stop requested";
    case E::Finished: return "finished";
    case E::Left: return "left";
    case E::CommDropped: return "comm dropped";
  }
  return "?";
}

const char* to_string(StepFailure f) {
  switch (f) {
    case StepFailure::None: return "none";
    case StepFailure::Transport: return "transport";
    case StepFailure::Divergence: return "divergence";
  }
  return "?";
}

const char* to_string(WorkerAction a) {
  switch (a) {
    case A::Join: return "join";
    case A::Report: return "report";
    case A::Form: return "form";
    case A::Resume: return "resume";
    case A::Train: return "train";
    case A::Leave: return "leave";
    case A::DropComm: return "drop comm";
    case A::End: return "end";
    case A::EndStandby: return "end standby";
  }
  return "?";
}

}  // namespace rf::ddp
