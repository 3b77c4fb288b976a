#pragma once
// ControlPlane — the coordinator as a worker's trainer, recovery and heartbeats see it: the
// one seam between worker and coordinator, as comm::Transport is for the data plane. Two
// implementations:
//   Client     (elastic/client.h)    TCP to `ringfence coord`, heartbeats on a thread
//   SimControl (elastic/sim_control.h) in memory, over a Membership on a simulated clock,
//                                    for W workers as threads of one test process
// The worker's side of the protocol lives here, once, for both: what a heartbeat reply
// means (a revocation, an eviction, a stop: on_heartbeat_reply), self-fencing (D4), and
// the report/plan loop of docs/protocol.md steps 2-4 (next_plan). An implementation only
// carries requests and heartbeats to a coordinator and their replies back.
//
// Callbacks run on whatever delivers heartbeat replies (Client: its heartbeat thread), one
// at a time, and must not call back into the ControlPlane; setting one (null included) waits
// for a call of the old one in progress.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "base/clock.h"
#include "elastic/membership_types.h"
#include "elastic/messages.h"
#include "elastic/replies.h"

namespace rf::elastic {

struct Revocation {
  uint64_t generation = 0;  // the new generation
  bool planned = false;     // a planned change (grow/replace) rather than a failure
  std::optional<Cause> cause;  // nullopt: the coordinator did not say
};

struct JoinInfo {
  uint64_t generation = 0;
  std::string phase;
  int target_world = 0;
};

class ControlPlane {
 public:
  virtual ~ControlPlane() = default;
  ControlPlane(const ControlPlane&) = delete;
  ControlPlane& operator=(const ControlPlane&) = delete;

  // When a heartbeat reply shows a generation newer than the one this worker works in:
  // once per generation (docs/protocol.md step 1, the communicator's abort).
  void on_revoked(std::function<void(const Revocation&)> cb);
  // This worker self-fenced (D4): it must stop applying steps and join() again.
  void on_fenced(std::function<void(const std::string& why)> cb);
  // The job is STOPPED (a digest mismatch, a worker's fatal report): once.
  void on_stopped(std::function<void()> cb);
  // Read before every heartbeat (must be cheap and thread-safe), given how long in all this
  // process did not run when its heartbeat thread was due to (frozen_total(): stopped, its
  // VM paused), for the source to discount what falls in the current activity.
  void set_activity_source(std::function<Activity(Duration frozen_total)> source);
  // The heartbeat thread, each time it wakes up late from a timed wait: the time it overslept
  // is time the whole process did not run (it runs at a real-time priority where it can,
  // base/thread_sched.h, so no other thread of the machine keeps it from its CPU).
  void note_overslept(Duration d) {
    if (d > Duration::zero()) frozen_ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
  }
  Duration frozen_total() const { return std::chrono::nanoseconds(frozen_ns_.load()); }

  // Joins as (slot, incarnation) and starts the heartbeats. Throws JobFinished when every
  // member had already left (DONE), Refused (wrong token, stale incarnation, job stopped)
  // or ConnectionLost. After a self-fence, join() again to come back as a new member.
  virtual JoinInfo join() = 0;

  // What every heartbeat carries: the last applied step; the global mean loss of it and this
  // worker's recent throughput in global samples/s (the launcher's live line); a checkpoint
  // writer's failures so far and the last error (also sent with the leave).
  void set_step(int64_t step) { step_.store(step); }
  void set_progress(double loss, double samples_per_s) {
    loss_.store(loss);
    samples_per_s_.store(samples_per_s);
  }
  void set_checkpoint_failures(int64_t failed, const std::string& last_error);

  int slot() const { return slot_; }
  uint64_t generation() const { return active_.load(); }  // the generation this worker works in
  uint64_t seen_generation() const { return seen_.load(); }
  bool reconfigure_requested() const { return reconfigure_.load(); }
  bool stop_requested() const { return stop_.load(); }
  bool fenced() const { return fenced_.load(); }
  std::string fence_reason() const;

  // --- recovery, docs/protocol.md steps 2-4 and 7 --------------------------------------
  virtual Answer report(uint64_t round, const StateReport& state) = 0;
  virtual PlanQuery wait_plan(uint64_t round, Duration timeout) = 0;
  // Reports `state()` for the round this worker must join (the open one, or g+1 after a
  // planned change, or "the next" for a new worker) and waits for its plan, reporting again
  // whenever the round is revoked. A round not open yet (this worker left generation g's
  // recovery, whose revocation has not come) is waited for, not asked again: the next report
  // goes when a heartbeat reply shows the coordinator past g. `timeout` bounds the whole
  // wait, standby included. Throws JobStopped, JobFinished, Refused (fenced) or CallTimeout.
  Plan next_plan(const std::function<StateReport()>& state, Duration timeout);
  // Step 7: ready(g), then wait until g runs (Running) or was revoked (Revoked).
  ReadyQuery ready(uint64_t generation, Duration timeout);

  // --- store: values are bytes -----------------------------------------------------------
  virtual void kv_set(uint64_t generation, const std::string& key, const std::string& value) = 0;
  virtual std::optional<std::string> kv_get(uint64_t generation, const std::string& key) = 0;
  // Waits until the key exists; throws CallTimeout naming the key at the deadline.
  virtual std::string kv_wait(uint64_t generation, const std::string& key, Duration timeout) = 0;
  // Sets desired if the value is `expected` (nullopt: absent); returns whether it did.
  virtual bool kv_cas(uint64_t generation, const std::string& key, const std::optional<std::string>& expected,
                      const std::string& desired) = 0;

  // kind gpu_stuck: this worker's own GPU never reached an operation of `generation`: the
  // coordinator evicts this worker.
  virtual Answer failure_report(uint64_t generation, int64_t step, std::optional<int> peer_slot,
                                const std::string& cause, FailureKind kind = FailureKind::comm) = 0;
  // The trainer's timing of one phase of its recovery into `generation`, for the summary.
  virtual void phase_timing(uint64_t generation, RecoveryPhase phase, double ms) = 0;
  // This worker cannot run for a reason every worker and every restart would meet again:
  // the coordinator STOPs the job with `error` (cut to the protocol's text bound).
  virtual void fatal(const std::string& error) = 0;
  // An --inject `step=` spec is about to fire here (the coordinator's `injected` event).
  // Best effort, bounded by one lease.
  virtual void injected(uint64_t generation, int64_t step, const std::string& spec) = 0;
  // Graceful exit (after the last step or on stop): the connection closing is then no failure.
  virtual void leave() = 0;
  virtual void close() = 0;

 protected:
  explicit ControlPlane(int slot) : slot_(slot) {}

  // The transport's half of ready(): the request, and the wait for its answer.
  virtual ReadyQuery ready_call(uint64_t generation, Duration timeout) = 0;
  // The transport's half of self-fencing: the coordinator must not count this worker as
  // alive any more (Client: its member connection closes). Called before on_fenced's callback.
  virtual void cut_off() {}

  // A join was accepted into the job at `generation`: a new member, nothing fenced yet.
  void admitted(uint64_t generation);
  // What a heartbeat says now, and what the leave says (the exact last step, the
  // checkpoint failures at the end).
  Heartbeat heartbeat_now() const;
  Leave leave_request() const;
  // Acts on one heartbeat reply; false when it fenced this worker.
  bool on_heartbeat_reply(const HeartbeatReply& reply);
  // Self-fences (D4): cut_off(), waiters woken, on_fenced called.
  void fence(const std::string& why);
  // Waits until a heartbeat reply shows a generation above g, this worker fences or the job
  // stops, or the deadline; returns whether the generation moved.
  bool wait_generation_above(uint64_t g, TimePoint deadline);
  bool stopped() const { return stopped_.load(); }

 private:
  void notify_generation_waiters();

  const int slot_;
  std::atomic<int64_t> step_{-1};
  std::atomic<int64_t> frozen_ns_{0};
  std::atomic<double> loss_{-1.0};           // < 0: none yet
  std::atomic<double> samples_per_s_{-1.0};  // < 0: none yet
  std::atomic<uint64_t> active_{0}, seen_{0}, notified_{0};
  std::atomic<bool> reconfigure_{false}, stop_{false}, fenced_{false}, stopped_{false};
  std::mutex gen_mu_;  // with gen_cv_: wait_generation_above's wait for seen_, fenced_, stopped_
  std::condition_variable gen_cv_;
  mutable std::mutex cb_mu_;
  std::function<void(const Revocation&)> on_revoked_;
  std::function<void(const std::string&)> on_fenced_;
  std::function<void()> on_stopped_;
  std::function<Activity(Duration)> activity_;
  std::string fence_reason_;
  int64_t ckpt_failed_ = 0;  // set_checkpoint_failures, under cb_mu_
  std::string ckpt_error_;
};

// `text` cut to the protocol's bound on text fields (kMaxTextBytes) at a UTF-8 boundary.
std::string bounded_text(const std::string& text);

}  // namespace rf::elastic
