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

const char* to_string(WorkerState s) { return name_of(kWorkerStateNames, s); }
const char* to_string(WorkerEventKind e) { return name_of(kWorkerEventKindNames, e); }
const char* to_string(StepFailure f) { return name_of(kStepFailureNames, f); }
const char* to_string(WorkerAction a) { return name_of(kWorkerActionNames, a); }

}  // namespace rf::ddp
