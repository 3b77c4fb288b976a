#pragma once
// The value types Membership takes and returns: options, answers, transitions for the
// event log and the per-recovery record that becomes the launcher's --summary.
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "base/clock.h"
#include "elastic/plan.h"

namespace rf::elastic {

using namespace std::chrono_literals;

enum class Phase { Forming, Running, Recovering, Stopped, Done };
const char* to_string(Phase p);  // FORMING, RUNNING, ...

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
  // Step 3 closes a round when every live member has reported; a member that stays alive
  // (heartbeating) but does not report this long after the round opened is evicted
  // (cause report_timeout), or it would block the round for ever.
  Duration report_timeout = 60s;
  // Names this job in every plan (Plan::job_id); the Coordinator draws a random one when
  // empty. Checkpoints record it, so a whole-job restart restores only its own.
  std::string job_id;  // at most kMaxJobIdBytes
};

// The reason of a Stopped answer once every member has left (DONE): a worker that meets it
// (a spare, a late restart) ends cleanly (Client's JobFinished), not as an error.
inline constexpr const char* kJobFinishedReason = "the job has finished";

// The generic answer of an event: accepted, or why not.
struct Answer {
  enum Kind { Accepted, Stale, Fenced, Refused, Stopped } kind = Accepted;
  uint64_t generation = 0;  // the coordinator's current generation
  std::string reason;
  bool ok() const { return kind == Accepted; }
};

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
  std::string cause;         // of the newest revocation
};

using ReportResult = Answer;

struct PlanQuery {
  enum Kind { Pending, Ready, Revoked, Fenced, Stopped, Done } kind = Pending;
  uint64_t generation = 0;
  Plan plan;          // when Ready
  std::string error;  // when Stopped
};

struct ReadyQuery {
  enum Kind { Pending, Running, Revoked, Fenced, Stopped, Done } kind = Pending;
  uint64_t generation = 0;
  std::string error;
};

// One line of the event log (the server adds wall-clock timestamps).
struct Transition {
  std::string event;  // join, refused, heartbeat_stale, fail, evict, revoke, report, stale,
                      // plan, ready, running, reconfigure_requested, stop_requested, leave, stop, done
  std::string cause;
  WorkerId worker;  // slot -1 when none
  uint64_t generation = 0;
  int64_t step = -1;
  TimePoint at;
  std::optional<TimePoint> first_seen;  // when the failure could first have been seen
  std::string detail;
};

struct RecoveryRecord {
  std::string cause;
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
  std::map<std::string, double> worker_phase_ms;  // connect/transfer/verify, max over workers
};

}  // namespace rf::elastic
