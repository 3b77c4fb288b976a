#pragma once
// The value types Membership takes and returns: options, answers, transitions for the
// event log and the per-recovery record that becomes the launcher's --summary.
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/enum_names.h"
#include "elastic/plan.h"

namespace rf::elastic {

using namespace std::chrono_literals;

enum class Phase { Forming, Running, Recovering, Stopped, Done };
inline constexpr EnumName<Phase> kPhaseNames[] = {
    {Phase::Forming, "FORMING"}, {Phase::Running, "RUNNING"}, {Phase::Recovering, "RECOVERING"},
    {Phase::Stopped, "STOPPED"}, {Phase::Done, "DONE"},
};
static_assert(lists_each_once(kPhaseNames));
const char* to_string(Phase p);  // FORMING, RUNNING, ...
// The phase named `text` (to_string's word); nullopt when it names none.
std::optional<Phase> parse_phase(const std::string& text);

// Why a worker failed or a generation was revoked: the `cause` of the event log's fail,
// evict and revoke lines, of a recovery in the summary, and of a revocation as workers hear
// it. to_string gives the event log's word (lease_expired, hung, ...).
enum class Cause {
  ConnectionClosed,      // D1: its member connection closed
  ProcessExited,         // D1: its launcher saw the process exit
  Replaced,              // D1: its slot joined again as a newer incarnation
  LeaseExpired,          // D2: no heartbeat renewed its lease in time
  Hung,                  // D3: its heartbeats say its training thread is stuck outside any collective
  Wedged,                // D3: ... stuck inside one, past the stall bound its own D3 should have ended it at
  ReportTimeout,         // step 3: a live member did not report for the round
  ReadyTimeout,          // step 7: a planned rank did not become ready
  LeftDuringRecovery,    // it left (finished) while a round it belongs to was open
  FailureReport,         // a worker reported a failure: transport error, D3 stall, divergence, bad image
  MemberLeftGeneration,  // a member reported for the next round on its own
  Reconfigure,           // planned: joiners wait for a round (R5)
  LeaderChanged,         // a coordinator replica took over from the leader (several replicas)
  GpuStuck,              // the worker said its own GPU never reached an operation (FailureKind::gpu_stuck)
};
inline constexpr EnumName<Cause> kCauseNames[] = {
    {Cause::ConnectionClosed, "connection_closed"},
    {Cause::ProcessExited, "process_exited"},
    {Cause::Replaced, "replaced"},
    {Cause::LeaseExpired, "lease_expired"},
    {Cause::Hung, "hung"},
    {Cause::Wedged, "wedged"},
    {Cause::ReportTimeout, "report_timeout"},
    {Cause::ReadyTimeout, "ready_timeout"},
    {Cause::LeftDuringRecovery, "left_during_recovery"},
    {Cause::FailureReport, "failure_report"},
    {Cause::MemberLeftGeneration, "member_left_generation"},
    {Cause::Reconfigure, "reconfigure"},
    {Cause::LeaderChanged, "leader_changed"},
    {Cause::GpuStuck, "gpu_stuck"},
};
static_assert(lists_each_once(kCauseNames));
// Every cause, in the table's order.
inline constexpr auto kCauses = all_values(kCauseNames);
const char* to_string(Cause c);
// The cause named `text` (to_string's word); nullopt when it names none.
std::optional<Cause> parse_cause(const std::string& text);
// The coordinator decided the worker is gone while its process may still run (hung,
// silent): the launcher SIGKILLs it before its slot is restarted (Membership::take_evictions).
bool evicts(Cause c);

// What a worker's failure report says (the `failure` request's `kind`): comm, a
// communication failure (a peer failed, a stall, a bad image: the peer it names, if any,
// is the culprit); gpu_stuck, the reporter's own GPU never reached an operation of its
// generation (comm's CommErrorInfo::device_stuck): the reporter is the culprit, evicted.
// (Inline: the request decoder, elastic/messages.cpp, stands alone in the fuzz target.)
enum class FailureKind : uint8_t { comm, gpu_stuck };
inline constexpr EnumName<FailureKind> kFailureKindNames[] = {{FailureKind::comm, "comm"},
                                                              {FailureKind::gpu_stuck, "gpu_stuck"}};
static_assert(lists_each_once(kFailureKindNames));
inline const char* to_string(FailureKind k) { return name_of(kFailureKindNames, k); }  // comm, gpu_stuck
// The kind named `text`; nullopt when it is none.
inline std::optional<FailureKind> parse_failure_kind(const std::string& text) {
  return parse_enum(kFailureKindNames, text);
}

// Why the coordinator stopped the job (the event log's `stop` line).
enum class StopCause { BelowMinWorld, DigestMismatch, WorkerFatal };
inline constexpr EnumName<StopCause> kStopCauseNames[] = {{StopCause::BelowMinWorld, "below_min_world"},
                                                          {StopCause::DigestMismatch, "digest_mismatch"},
                                                          {StopCause::WorkerFatal, "worker_fatal"}};
static_assert(lists_each_once(kStopCauseNames));
const char* to_string(StopCause c);

// The phases of a recovery that a worker times and reports (the `phase` request), each the
// max over the workers in the summary's `phases`: connect (the new communicator), transfer
// (state from its source rank), verify (the digest of what it holds).
enum class RecoveryPhase { Connect, Transfer, Verify };
inline constexpr EnumName<RecoveryPhase> kRecoveryPhaseNames[] = {
    {RecoveryPhase::Connect, "connect"}, {RecoveryPhase::Transfer, "transfer"}, {RecoveryPhase::Verify, "verify"}};
static_assert(lists_each_once(kRecoveryPhaseNames));
// Every recovery phase, in the order the summary lists them.
inline constexpr auto kRecoveryPhases = all_values(kRecoveryPhaseNames);
const char* to_string(RecoveryPhase p);  // connect, transfer, verify: the wire's word
// The recovery phase named `text`; nullopt when it names none.
std::optional<RecoveryPhase> parse_recovery_phase(const std::string& text);

// What a member's heartbeat says of its training thread, for the coordinator's judgement
// of a live but stuck member (elastic/liveness.h). Durations are on the worker's own clock,
// so no two clocks need to agree.
struct Activity {
  enum Kind { Idle, Compute, Wait };
  Kind kind = Idle;      // Idle: not in a step or a recovery phase (waiting on the coordinator)
  Duration elapsed{};    // how long it had been in `kind` when the heartbeat left
  Duration runnable{};   // ... of which it waited for a CPU (starved, not stuck: not judged)
  Duration bound{};      // its stall bound for what it does now (zero: do not judge it)
  std::string where;     // e.g. "step 325", "recovery of generation 3" (for the event log)
  Duration frozen{};     // of `elapsed`, time the whole process did not run (stopped, its VM
                         // paused): frozen, not stuck, not judged either
};
inline constexpr EnumName<Activity::Kind> kActivityKindNames[] = {
    {Activity::Idle, "idle"}, {Activity::Compute, "compute"}, {Activity::Wait, "wait"}};
static_assert(lists_each_once(kActivityKindNames));
const char* to_string(Activity::Kind k);  // idle, compute, wait
std::optional<Activity::Kind> parse_activity_kind(const std::string& text);

inline constexpr size_t kMaxJobIdBytes = 64;  // Plan::job_id is bounded on the wire

struct MembershipOptions {
  int target_world = 1;  // W
  int min_world = 1;
  Duration heartbeat = 100ms;  // only to say when a missed heartbeat could first be seen
  Duration lease = 1s;         // D2
  Duration join_window = 2s;   // step 3
  Duration form_timeout = 60s;       // the first round waits this long for all W workers
  Duration min_world_timeout = 30s;  // after the window, how long to wait for min_world
  Duration ready_timeout = 60s;      // plan -> all ready; a rank stuck longer is evicted
  // Step 3 closes a round when every live member has reported. A member stuck in a step or
  // a recovery phase is evicted by its heartbeats' activity (D3, elastic/liveness.h) within
  // its stall bound; one that reports no activity and no state this long after the round
  // opened is evicted too (cause report_timeout), or it would block the round for ever.
  Duration report_timeout = 30s;
  // D3 on the coordinator's side: a member waiting inside one collective for more than this
  // many of its stall bounds is wedged (its own D3 fires at 1.5 bounds, see ddp/stall_bound.h).
  double wedge_factor = 2.0;
  // Names this job in every plan (Plan::job_id); the Coordinator draws a random one when
  // empty. Checkpoints record it, so a whole-job restart restores only its own.
  std::string job_id;  // at most kMaxJobIdBytes
  // The generation the first round forms. 1 for a new job; a coordinator that takes over
  // from another continues after the newest generation that one committed (a generation
  // number is never reused, docs/protocol.md "Control plane").
  uint64_t first_generation = 1;
  // The members of the generation that ran under the previous leader, in rank order. Not
  // empty: the first round is a recovery (cause leader_changed) that expects them and keeps
  // their ranks, so with the same W every batch is split as before.
  std::vector<WorkerId> previous_members;
};

// The reason of a Finished answer: every member has left (DONE). A worker that meets it (a
// spare, a late restart) ends cleanly (Client's JobFinished), not as an error.
inline constexpr const char* kJobFinishedReason = "the job has finished";

// The generic answer of an event: accepted, or why not. Stopped: the job was stopped by an
// error (reason); Finished: it ended normally, every member left (DONE).
struct Answer {
  enum Kind { Accepted, Stale, Fenced, Refused, Stopped, Finished } kind = Accepted;
  uint64_t generation = 0;  // the coordinator's current generation
  std::string reason;
  bool ok() const { return kind == Accepted; }
};
inline constexpr EnumName<Answer::Kind> kAnswerKindNames[] = {
    {Answer::Accepted, "accepted"}, {Answer::Stale, "stale"},     {Answer::Fenced, "fenced"},
    {Answer::Refused, "refused"},   {Answer::Stopped, "stopped"}, {Answer::Finished, "finished"},
};
static_assert(lists_each_once(kAnswerKindNames));
const char* to_string(Answer::Kind k);  // accepted, stale, fenced, refused, stopped, finished
std::optional<Answer::Kind> parse_answer_kind(const std::string& text);

struct JoinResult : Answer {
  Phase phase = Phase::Forming;
};

struct HeartbeatResult {
  bool fenced = false;  // unknown or evicted worker: stop applying steps and re-join (D4)
  uint64_t generation = 0;
  Phase phase = Phase::Forming;
  bool reconfigure = false;  // R5: a joiner waits, leave g after the same step
  bool stop = false;         // R5: graceful stop
  bool planned = false;      // the newest revocation was a planned change
  std::optional<Cause> cause;  // of the newest revocation (none yet)
};

using ReportResult = Answer;

struct PlanQuery {
  enum Kind { Pending, Ready, Revoked, Fenced, Stopped, Done } kind = Pending;
  uint64_t generation = 0;
  Plan plan;          // when Ready
  std::string error;  // when Stopped
};
inline constexpr EnumName<PlanQuery::Kind> kPlanQueryKindNames[] = {
    {PlanQuery::Pending, "pending"}, {PlanQuery::Ready, "plan"},      {PlanQuery::Revoked, "revoked"},
    {PlanQuery::Fenced, "fenced"},   {PlanQuery::Stopped, "stopped"}, {PlanQuery::Done, "done"},
};
static_assert(lists_each_once(kPlanQueryKindNames));
const char* to_string(PlanQuery::Kind k);  // a plan reply's status word: pending, plan, revoked, ...

struct ReadyQuery {
  enum Kind { Pending, Running, Revoked, Fenced, Stopped, Done } kind = Pending;
  uint64_t generation = 0;
  std::string error;
};
inline constexpr EnumName<ReadyQuery::Kind> kReadyQueryKindNames[] = {
    {ReadyQuery::Pending, "pending"}, {ReadyQuery::Running, "running"}, {ReadyQuery::Revoked, "revoked"},
    {ReadyQuery::Fenced, "fenced"},   {ReadyQuery::Stopped, "stopped"}, {ReadyQuery::Done, "done"},
};
static_assert(lists_each_once(kReadyQueryKindNames));
const char* to_string(ReadyQuery::Kind k);  // a ready reply's status word: pending, running, revoked, ...

// What a line of the event log records; to_string gives its `event` word (join, refused,
// heartbeat_stale, ...).
enum class TransitionEvent {
  Join, Refused, HeartbeatStale, Fail, Evict, Revoke, Report, Stale, Plan, Ready, Running,
  ReconfigureRequested, StopRequested, Leave, Injected, Stop, Done,
};
inline constexpr EnumName<TransitionEvent> kTransitionEventNames[] = {
    {TransitionEvent::Join, "join"},
    {TransitionEvent::Refused, "refused"},
    {TransitionEvent::HeartbeatStale, "heartbeat_stale"},
    {TransitionEvent::Fail, "fail"},
    {TransitionEvent::Evict, "evict"},
    {TransitionEvent::Revoke, "revoke"},
    {TransitionEvent::Report, "report"},
    {TransitionEvent::Stale, "stale"},
    {TransitionEvent::Plan, "plan"},
    {TransitionEvent::Ready, "ready"},
    {TransitionEvent::Running, "running"},
    {TransitionEvent::ReconfigureRequested, "reconfigure_requested"},
    {TransitionEvent::StopRequested, "stop_requested"},
    {TransitionEvent::Leave, "leave"},
    {TransitionEvent::Injected, "injected"},
    {TransitionEvent::Stop, "stop"},
    {TransitionEvent::Done, "done"},
};
static_assert(lists_each_once(kTransitionEventNames));
// Every event, in the table's order.
inline constexpr auto kTransitionEvents = all_values(kTransitionEventNames);
const char* to_string(TransitionEvent e);
std::optional<TransitionEvent> parse_transition_event(const std::string& text);

// One line of the event log (the server adds wall-clock timestamps).
struct Transition {
  TransitionEvent event = TransitionEvent::Join;
  std::string cause;
  WorkerId worker;  // slot -1 when none
  uint64_t generation = 0;
  int64_t step = -1;
  TimePoint at;
  std::optional<TimePoint> first_seen;  // when the failure could first have been seen
  std::string detail;
};

struct RecoveryRecord {
  Cause cause = Cause::FailureReport;
  WorkerId worker;
  bool planned = false;
  uint64_t from_generation = 0;
  uint64_t generation = 0;  // the round being formed, then the generation that ran
  int rounds = 0;           // >1 when a failure during recovery revoked g+1 into g+2
  bool whole_job_restart = false;  // a round found nobody holding state: T came from disk
  TimePoint first_seen, revoked, planned_at, running_at;
  bool finished = false;
  int64_t target_step = -1;
  int world = 0;
  std::map<RecoveryPhase, double> worker_phase_ms;  // max over workers
};

}  // namespace rf::elastic
