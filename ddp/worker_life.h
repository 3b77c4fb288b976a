#pragma once
// The worker's life cycle as a pure function of (state, event): where the trainer goes after
// each phase of docs/protocol.md's recovery and of a generation of training, unit-tested on
// every (state, event) pair (tests/ddp/test_worker_life.cpp). Trainer::run is the shell: it
// performs the action, whose outcome is the next event.
//
//   state       event                         -> state       action
//   Joining     Joined                        -> Reporting   Report
//   Joining     JobFinished                   -> Done        EndStandby  (nothing left to do)
//   Reporting   PlanReceived                  -> Forming     Form        (plan, steps 5-7)
//   Reporting   Fenced                        -> Dropping    DropComm
//   Reporting   JobFinished                   -> Done        EndStandby  (no plan for it)
//   Forming     Formed                        -> Resuming    Resume      (step 8)
//   Forming     FormFailed                    -> Dropping    DropComm
//   Resuming    Running                       -> Training    Train
//   Resuming    Revoked                       -> Dropping    DropComm
//   Resuming    JobFinished                   -> Done        End         (a member to the end)
//   Training    StepFailed (any kind)         -> Dropping    DropComm    (R1: not applied)
//   Training    Revoked                       -> Dropping    DropComm
//   Training    Reconfigure                   -> Dropping    DropComm    (R5: all leave g)
//   Training    StopRequested                 -> Leaving     Leave       (R5: all stop)
//   Training    Finished                      -> Leaving     Leave       (the last step)
//   Leaving     Left                          -> Done        End
//   Leaving     Fenced                        -> Dropping    DropComm    (D4: the next generation)
//   Dropping    CommDropped                   -> Reporting   Report      (the next generation)
//   Dropping    Fenced                        -> Joining     Join        (D4: a new member)
//
// Any other pair is a broken invariant (rf::EnforceError). Done has no events.
//
// A worker that reached the leave (the last step applied, or the stop's step) remembers it
// (WorkerTransition::reached_leave): fenced before its leave was answered (D4), it joins
// again to leave, and if the job finished meanwhile (the others left under a new leader),
// EndStandby becomes End: it trained to the end like any member, and ends as one (its
// final digest, rank 0's evaluation).
#include <cstdint>

#include "base/enum_names.h"

namespace rf::ddp {

enum class WorkerState { Joining, Reporting, Forming, Resuming, Training, Leaving, Dropping, Done };
inline constexpr EnumName<WorkerState> kWorkerStateNames[] = {
    {WorkerState::Joining, "joining"},   {WorkerState::Reporting, "reporting"}, {WorkerState::Forming, "forming"},
    {WorkerState::Resuming, "resuming"}, {WorkerState::Training, "training"},   {WorkerState::Leaving, "leaving"},
    {WorkerState::Dropping, "dropping"}, {WorkerState::Done, "done"},
};
static_assert(lists_each_once(kWorkerStateNames));

enum class WorkerEventKind {
  Joined,         // join: this worker is a member of the job
  JobFinished,    // join, report or ready: the job finished
  PlanReceived,   // report (steps 2-4): the coordinator's plan of the next generation
  Fenced,         // a call to the coordinator was refused: this worker self-fenced (D4)
  Formed,         // plan, connect, transfer, verify (steps 5-7) done
  FormFailed,     // one of them failed: report again for the next generation
  Running,        // ready (step 8): the generation runs
  Revoked,        // the generation was revoked (or this worker fenced) before it ended
  StepFailed,     // a step's collective failed (kind: StepFailure); nothing applied (R1)
  Reconfigure,    // R5: every rank leaves the generation after the step (a joiner waits)
  StopRequested,  // R5: a graceful stop, every rank stops after the step
  Finished,       // the last step is applied
  Left,           // the coordinator took the leave
  CommDropped,    // the generation's communicator is gone, this worker still a member
};
inline constexpr EnumName<WorkerEventKind> kWorkerEventKindNames[] = {
    {WorkerEventKind::Joined, "joined"},
    {WorkerEventKind::JobFinished, "job finished"},
    {WorkerEventKind::PlanReceived, "plan received"},
    {WorkerEventKind::Fenced, "fenced"},
    {WorkerEventKind::Formed, "formed"},
    {WorkerEventKind::FormFailed, "form failed"},
    {WorkerEventKind::Running, "running"},
    {WorkerEventKind::Revoked, "revoked"},
    {WorkerEventKind::StepFailed, "step failed"},
    {WorkerEventKind::Reconfigure, "reconfigure"},
    {WorkerEventKind::StopRequested, "stop requested"},
    {WorkerEventKind::Finished, "finished"},
    {WorkerEventKind::Left, "left"},
    {WorkerEventKind::CommDropped, "comm dropped"},
};
static_assert(lists_each_once(kWorkerEventKindNames));

// Why a step failed: a transport error, stall or abort (comm::CommError), or replicas
// found diverged by verify-every (the job stops at the next plan).
enum class StepFailure { None, Transport, Divergence };
inline constexpr EnumName<StepFailure> kStepFailureNames[] = {
    {StepFailure::None, "none"}, {StepFailure::Transport, "transport"}, {StepFailure::Divergence, "divergence"}};
static_assert(lists_each_once(kStepFailureNames));

struct WorkerEvent {
  WorkerEventKind kind;
  StepFailure failure = StepFailure::None;  // StepFailed only
};

enum class WorkerAction {
  Join,        // join the job (again)
  Report,      // report (step, digest) and wait for the plan (steps 2-4)
  Form,        // adopt the plan, connect, transfer, verify (steps 5-7)
  Resume,      // ready (step 8)
  Train,       // train the generation until it ends
  Leave,       // the final checkpoint, then leave the job
  DropComm,    // drop the generation's communicator; fenced: join again
  End,         // run() returns: this worker trained to the job's end
  EndStandby,  // run() returns: this worker ended without training to the end (a spare)
};
inline constexpr EnumName<WorkerAction> kWorkerActionNames[] = {
    {WorkerAction::Join, "join"},
    {WorkerAction::Report, "report"},
    {WorkerAction::Form, "form"},
    {WorkerAction::Resume, "resume"},
    {WorkerAction::Train, "train"},
    {WorkerAction::Leave, "leave"},
    {WorkerAction::DropComm, "drop comm"},
    {WorkerAction::End, "end"},
    {WorkerAction::EndStandby, "end standby"},
};
static_assert(lists_each_once(kWorkerActionNames));

const char* to_string(WorkerState s);
const char* to_string(WorkerEventKind e);
const char* to_string(StepFailure f);
const char* to_string(WorkerAction a);

struct WorkerTransition {
  WorkerState state;
  WorkerAction action;
  bool reached_leave = false;  // a Leave was taken: this worker trained to the job's end (or stop)
};

// The next transition from `from` (its state and what it remembers) on `event`.
WorkerTransition next_action(const WorkerTransition& from, WorkerEvent event);
// The table alone: from `state` with nothing remembered.
WorkerTransition next_action(WorkerState state, WorkerEvent event);

}  // namespace rf::ddp
