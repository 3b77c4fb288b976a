#pragma once
// Membership — the generation state machine of docs/protocol.md, as a pure class: no sockets,
// no threads, no clock of its own (every method takes `now`). The coordinator's server
// feeds it events (join, heartbeat, report, ready, failure, connection lost, process
// exited, leave, a worker's fatal error) and timer ticks, and turns its answers into
// replies; the same calls in a unit test replay any interleaving exactly (torchft's
// quorum_compute is the model).
//
// Phases: FORMING (round for generation 1) -> RUNNING -> RECOVERING (round for g+1) ->
// RUNNING ... and the ends STOPPED (an error) and DONE (every member left after finishing).
// Generations only grow; a failure during a round revokes it into the next number.
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <string>
#include <vector>

#include "base/clock.h"
#include "elastic/membership_types.h"

namespace rf::elastic {

class Membership {
 public:
  explicit Membership(MembershipOptions options, TimePoint now);

  // --- events --------------------------------------------------------------------------
  JoinResult join(WorkerId w, TimePoint now);
  // `activity`: what the worker's training thread does (elastic/liveness.h); a member stuck
  // in it past its stall bound is evicted at the next tick (Cause::Hung / Cause::Wedged).
  HeartbeatResult heartbeat(WorkerId w, uint64_t worker_generation, int64_t step, TimePoint now,
                            const Activity& activity = {});
  // Step 2. round = the generation being formed as the worker knows it (from a heartbeat
  // reply); 0 = "the next round that will include me" (new and restarted workers).
  ReportResult report(WorkerId w, uint64_t round, const StateReport& state, TimePoint now);
  // with_plan false: q.plan holds only the generation (no copy of W ranks).
  PlanQuery plan_for(WorkerId w, uint64_t round, bool with_plan = true) const;
  Answer ready(WorkerId w, uint64_t generation, TimePoint now);
  ReadyQuery ready_state(WorkerId w, uint64_t generation) const;
  // A worker saw a peer fail (transport error, D3 stall): kind comm. Stale generations are
  // ignored. Kind gpu_stuck: the reporter's own GPU never reached an operation of
  // `generation`; the reporter is the culprit (peer_slot is not read), evicted with
  // Cause::GpuStuck in one round whichever report comes first: for the current generation
  // it fails and revokes as any eviction; for an older one, while the reporter is expected
  // in the open round and no plan places it, it leaves that round without revoking it.
  Answer failure_report(WorkerId reporter, uint64_t generation, int64_t step, std::optional<int> peer_slot,
                        const std::string& cause, TimePoint now, FailureKind kind = FailureKind::comm);
  void connection_lost(WorkerId w, TimePoint now);                                  // D1
  // What the coordinator knew of a process the launcher saw exit (D1): whether it ever
  // joined (its hello was answered), and whether it had left the job gracefully (finished
  // its steps, or stopped: R5) before it died. The launcher judges the exit by it.
  struct ExitedInfo {
    bool registered = false;
    bool left = false;
  };
  ExitedInfo process_exited(WorkerId w, int status, TimePoint exited_at, TimePoint now);  // D1, by the launcher
  // A worker cannot run for a reason that is the same on every worker and every restart
  // (its configuration): the job STOPs with that error (cause worker_fatal), like a digest
  // mismatch; a restart would only meet it again. Ignored once the job is over.
  Answer worker_fatal(WorkerId w, const std::string& error, TimePoint now);
  Answer leave(WorkerId w, TimePoint now, std::optional<int64_t> step = std::nullopt);
  void phase_timing(WorkerId w, uint64_t generation, RecoveryPhase phase, double ms);
  // A worker fires an --inject step= spec (logged as `injected`, listed by fired()).
  void worker_injected(WorkerId w, uint64_t generation, int64_t step, const std::string& spec, TimePoint now);
  struct Fired {
    std::string spec;
    WorkerId worker;
    uint64_t generation = 0;
    int64_t step = -1;
    TimePoint at;
  };
  const std::vector<Fired>& fired() const { return fired_; }  // the first kMaxFired
  static constexpr size_t kMaxFired = 1024;  // x (a spec <= 256 bytes + ~100): one frame
  void request_stop(TimePoint now);
  // Leases (D2), stuck members (D3, elastic/liveness.h), round closing (step 3,
  // elastic/round_decision.h), the report and ready timeouts.
  void tick(TimePoint now);

  // --- state ---------------------------------------------------------------------------
  Phase phase() const { return phase_; }
  uint64_t generation() const { return generation_; }
  const std::vector<WorkerId>& members() const { return members_; }  // rank order, RUNNING
  const std::optional<Plan>& plan() const { return round_plan_; }    // of the open round
  const std::optional<Plan>& running_plan() const { return running_plan_; }
  bool reconfigure_flag() const;
  bool stop_flag() const { return stop_flag_; }
  const std::string& error() const { return error_; }
  int64_t max_member_step() const;
  const std::vector<RecoveryRecord>& recoveries() const { return recoveries_; }
  int live_workers() const;
  // Registered workers (joined, live, not left) that are not members of the last RUNNING
  // generation: the spares standing by, and joiners waiting for a round. A process the
  // launcher started but that has not joined yet is not among them.
  std::vector<WorkerId> standby() const;

  // Drained by the server: transitions for the event log, workers evicted as hung (the
  // launcher SIGKILLs them before replacing them).
  std::vector<Transition> take_transitions() { return std::exchange(transitions_, {}); }
  std::vector<WorkerId> take_evictions() { return std::exchange(evictions_, {}); }

 private:
  struct Worker {
    WorkerId id;
    bool live = true;
    bool left = false;
    TimePoint lease_expiry;
    TimePoint last_heartbeat;
    int64_t step = -1;
    uint64_t seen_generation = 0;
    Activity activity;        // as its last heartbeat said
    TimePoint activity_at;    // when that heartbeat came
    std::optional<StateReport> report;
    std::optional<uint64_t> report_round;  // 0 = waiting for the next round
    uint64_t join_order = 0;
  };
  struct Round {
    std::set<int> expected;  // slots of live members of the previous generation
    TimePoint started;
    TimePoint planned_at;
    std::set<int> ready;
    bool forming = false;
  };

  Worker* live_worker(WorkerId w);
  const Worker* live_worker(WorkerId w) const;
  bool in_round(int slot) const;
  bool is_member(WorkerId w) const;
  // Whether the job counts on w now: a member of the running generation, or a participant
  // of the open round. Only they are judged by their activity (spares are idle).
  bool counted_on(const Worker& w) const;
  // The worker is gone (a detector's cause): logged as fail, or as evict when the
  // coordinator decided it (evicts(cause): handed to the launcher to SIGKILL), and the
  // generation or round it belongs to is revoked.
  void fail(Worker& w, Cause cause, TimePoint now, TimePoint first_seen, const std::string& detail);
  void revoke(Cause cause, WorkerId who, int64_t step, TimePoint now, TimePoint first_seen, bool planned,
              const std::string& detail);
  // A gpu_stuck report of an older generation (see failure_report): whether it applied.
  bool evict_stuck_from_round(Worker& w, TimePoint now, const std::string& detail);
  void judge_stuck_members(TimePoint now);
  void try_close_round(TimePoint now);
  void become_running(TimePoint now);
  void stop_job(StopCause cause, const std::string& error, TimePoint now);
  void check_done(TimePoint now);
  void log(Transition t) { transitions_.push_back(std::move(t)); }

  MembershipOptions opt_;
  Phase phase_ = Phase::Forming;
  uint64_t generation_ = 1;  // FORMING builds generation first_generation (1 for a new job)
  std::map<int, Worker> workers_;  // by slot; only the newest incarnation of a slot
  std::vector<WorkerId> members_;
  std::map<int, int64_t> member_index_;  // members_ by slot (incarnation): is_member in log N
  void set_members(std::vector<WorkerId> m);
  std::vector<int> prev_slots_;
  Round round_;
  std::optional<Plan> round_plan_;
  std::optional<Plan> running_plan_;
  bool in_episode_ = false;
  bool last_revoke_planned_ = false;
  std::optional<Cause> last_revoke_cause_;
  bool stop_flag_ = false;
  std::string error_;
  uint64_t join_counter_ = 0;
  std::set<std::pair<int, int64_t>> ever_joined_;  // (slot, incarnation) whose join was accepted
  std::vector<RecoveryRecord> recoveries_;
  std::vector<Fired> fired_;
  std::vector<Transition> transitions_;
  std::vector<WorkerId> evictions_;
};

}  // namespace rf::elastic
