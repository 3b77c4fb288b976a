#pragma once
// SimCoordinator and SimControl — the coordinator in memory, for W workers as threads of one
// process (tests/ddp/inproc): a Membership and a KvStore on a simulated clock, and one
// SimControl per worker, the ControlPlane (elastic/control_plane.h) it talks to instead of a
// TCP Client.
//
// Time passes only when the test says so: advance(d) moves the clock by d, delivers the
// heartbeat of every joined worker that is not paused (each carrying what its training
// thread does, its elapsed time counted on the simulated clock) and ticks the Membership
// (leases, D3, round timeouts). Every event a worker sends (join, report, ready, failure,
// leave...) is followed at once by the heartbeat replies it would cause, so a revocation
// reaches every worker without time passing. A worker's process dying is kill() (D1: its
// connection closed), a SIGSTOP is pause() (no heartbeats: D2 after one lease of advance()).
//
// Blocking calls (wait_plan, ready, kv_wait) wait on the real clock for their answer, bounded
// by their timeout; killing a worker ends its waits with ConnectionLost.
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/clock.h"
#include "elastic/control_plane.h"
#include "elastic/kv_store.h"
#include "elastic/membership.h"

namespace rf::elastic {

class SimControl;

class SimCoordinator {
 public:
  explicit SimCoordinator(MembershipOptions options);
  SimCoordinator(const SimCoordinator&) = delete;
  SimCoordinator& operator=(const SimCoordinator&) = delete;

  // The control plane of worker (slot, incarnation), not joined yet.
  std::shared_ptr<SimControl> worker(int slot, int64_t incarnation);

  // The simulated clock moves by d: heartbeats, then a tick.
  void advance(Duration d);
  // advance(d) only while no worker is on its way to a join (made, neither joined nor
  // closed since: its first join, or its join again after a fence), and every joined worker
  // that is not paused nor in `stuck` is quiet
  // (its activity, read live): none computing (else time passing would judge it on time it
  // did not spend), and with Quiet::Idle none waiting inside a collective either (every one
  // waits on the coordinator, so only its timers can move the job on). Returns whether the
  // clock moved.
  enum class Quiet { NoCompute, Idle };
  bool advance_if_quiet(Duration d, const std::vector<WorkerId>& stuck, Quiet quiet);
  // Worker w's process is gone (D1: its connection closed); its calls fail from now on.
  void kill(WorkerId w);
  // Worker w sends no heartbeats while paused (a SIGSTOP: its lease runs out, D2).
  void pause(WorkerId w, bool paused);

  // --- what the coordinator knows ------------------------------------------------------
  TimePoint now() const;
  Phase phase() const;
  uint64_t generation() const;
  int running_world() const;  // of the generation that runs (0: none runs)
  std::vector<RecoveryRecord> recoveries() const;
  // Every transition logged so far (the event log's lines), oldest first.
  std::vector<Transition> transitions() const;
  // One line per worker: its state here and the call it is blocked in, if any (for a
  // failed test's message).
  std::string describe() const;
  // Workers the coordinator evicted (D3, timeouts) since the last call: the launcher would
  // SIGKILL them.
  std::vector<WorkerId> take_evictions();

 private:
  friend class SimControl;
  // After an event: the heartbeat replies it causes, delivered outside the lock, and the
  // blocked calls woken.
  void after_event();
  // Delivers one heartbeat of every joined, unpaused worker at the current time.
  void heartbeats();
  void drain_locked();  // transitions and evictions out of the Membership; old store scopes dropped

  std::mutex deliver_mu_;  // one delivery of heartbeat replies at a time, before mu_
  mutable std::mutex mu_;
  std::condition_variable cv_;  // any change: blocked calls look again
  uint64_t changes_ = 0;        // counts them: a blocked call that has not looked since is not quiet
  TimePoint now_;
  Membership m_;
  KvStore kv_;
  std::vector<Transition> log_;
  std::vector<WorkerId> evictions_;
  std::vector<std::weak_ptr<SimControl>> workers_;
};

class SimControl final : public ControlPlane {
 public:
  SimControl(SimCoordinator& coordinator, WorkerId id);
  WorkerId id() const { return id_; }

  JoinInfo join() override;
  Answer report(uint64_t round, const StateReport& state) override;
  PlanQuery wait_plan(uint64_t round, Duration timeout) override;
  void kv_set(uint64_t generation, const std::string& key, const std::string& value) override;
  std::optional<std::string> kv_get(uint64_t generation, const std::string& key) override;
  std::string kv_wait(uint64_t generation, const std::string& key, Duration timeout) override;
  bool kv_cas(uint64_t generation, const std::string& key, const std::optional<std::string>& expected,
              const std::string& desired) override;
  Answer failure_report(uint64_t generation, int64_t step, std::optional<int> peer_slot, const std::string& cause,
                        FailureKind kind = FailureKind::comm) override;
  void phase_timing(uint64_t generation, RecoveryPhase phase, double ms) override;
  void fatal(const std::string& error) override;
  void injected(uint64_t generation, int64_t step, const std::string& spec) override;
  void leave() override;
  // Without a leave first: the connection closes (D1), as when a process ends.
  void close() override;

 private:
  friend class SimCoordinator;
  ReadyQuery ready_call(uint64_t generation, Duration timeout) override;
  void cut_off() override;  // fenced: the connection closes (D1)
  // Under the coordinator's lock: throws ConnectionLost once killed or closed.
  void check_alive() const;
  // Under the coordinator's lock: the connection closes (the coordinator sees it lost);
  // false when it was closed already.
  bool drop_connection_locked();
  // A blocked call's wait for a change (the lock is c_.mu_'s), counted in blocked_.
  void wait(std::unique_lock<std::mutex>& l, TimePoint deadline, std::string what);
  // One heartbeat now (the coordinator's lock held); nullopt when this worker sends none.
  std::optional<HeartbeatReply> beat_locked();

  SimCoordinator& c_;
  const WorkerId id_;
  // Under c_.mu_: joined and not closed since; closed (the worker is done with it); the
  // process dead (kill); no heartbeats (pause).
  bool connected_ = false, closed_ = false, killed_ = false, paused_ = false;
  int blocked_ = 0;  // its calls waiting for an answer now
  std::string blocked_in_;  // the last of them
  uint64_t looked_at_ = 0;  // the coordinator's changes_ when it last looked
  std::optional<Activity> last_activity_;  // what the last heartbeat said, and since when
  TimePoint activity_since_;
};

}  // namespace rf::elastic
