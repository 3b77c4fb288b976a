#pragma once
// Client — the coordinator as seen from inside a worker.
//
// Two connections: the *member* connection carries join (in its hello) and the heartbeat
// thread; its closing is how the coordinator sees this process die (D1). The *caller*
// connection carries the blocking calls of the training thread (report, plan, ready,
// store, failure report), so a long wait for a plan never delays a heartbeat.
//
// The heartbeat thread renews the lease: a heartbeat every `heartbeat`, without waiting for
// the previous reply, each carrying the current step and what the training thread is doing
// (set_activity_source; the coordinator evicts a member stuck past its stall bound,
// elastic/liveness.h). A renewal counts from when its heartbeat left (elastic/lease_renewal.h).
// When a reply shows a generation newer than the one this worker works in, it calls
// on_revoked once for that generation (the communicator's abort; docs/protocol.md step 1).
// When it cannot renew for one `lease`, or the coordinator says this worker was evicted,
// it self-fences (D4): calls on_fenced, stops heartbeating, and the worker must stop
// applying steps and join() again (it comes back as a new member).
// When a reply says the job is STOPPED (a digest mismatch, a worker's fatal report), it
// calls on_stopped once: a worker training or connecting must not go on until its
// collective or connect deadline; its next coordinator call answers with the error.
// Callbacks run on the heartbeat thread and must not call back into the Client.
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "elastic/membership_types.h"
#include "elastic/errors.h"
#include "elastic/replies.h"
#include "elastic/wire.h"

namespace rf::elastic {

struct ClientOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  // Several coordinator replicas (`ringfence coord --etcd`): the leader is looked up in
  // this etcd cluster for `job` (elastic/leadership.h) at every join, and host/port are not
  // used. A join waits for a leader until connect_timeout. Losing the leader's connection
  // self-fences (D4) like a lease that cannot be renewed, and every call after it throws
  // Refused: the worker joins the next leader as a new member.
  std::vector<std::string> etcd;
  std::string job = "ringfence";
  std::string token;
  int slot = 0;
  int64_t incarnation = 0;
  Duration connect_timeout = std::chrono::seconds(10);
  Duration call_timeout = std::chrono::seconds(30);  // report, store, failure report
  // Heartbeat and lease come from the coordinator's welcome; these are only fallbacks.
  Duration heartbeat = std::chrono::milliseconds(100);
  Duration lease = std::chrono::seconds(1);

  // From RINGFENCE_COORD (host:port) or RINGFENCE_ETCD (endpoints) and RINGFENCE_JOB,
  // RINGFENCE_TOKEN, RINGFENCE_SLOT, RINGFENCE_INCARNATION. Throws rf::InvalidInput naming a
  // missing or bad variable.
  static ClientOptions from_env();
};

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

class Client {
 public:
  explicit Client(ClientOptions options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  void on_revoked(std::function<void(const Revocation&)> cb);
  void on_fenced(std::function<void(const std::string& why)> cb);
  void on_stopped(std::function<void()> cb);
  // Read on the heartbeat thread before every heartbeat (must be cheap and thread-safe).
  void set_activity_source(std::function<Activity()> source);

  // Connects both connections, joins (slot, incarnation), starts the heartbeat thread.
  // Throws JobFinished when every member had already left (DONE), Refused (wrong token,
  // stale incarnation, job stopped) or ConnectionLost.
  // After a self-fence, join() again to come back as a new member.
  JoinInfo join();

  void set_step(int64_t step) { step_.store(step); }
  // What the launcher's live line shows (sent with every heartbeat): the global mean loss
  // of the last applied step and this worker's recent throughput in global samples/s.
  void set_progress(double loss, double samples_per_s) {
    loss_.store(loss);
    samples_per_s_.store(samples_per_s);
  }
  // A checkpoint writer's disk checkpoints that could not be written so far and the last
  // error: sent with every heartbeat once non-zero, and with the leave (the count at the
  // end, however short the job), for the launcher's live line, summary and event log.
  void set_checkpoint_failures(int64_t failed, const std::string& last_error);
  uint64_t generation() const { return active_.load(); }  // the generation this worker works in
  uint64_t seen_generation() const { return seen_.load(); }
  bool reconfigure_requested() const { return reconfigure_.load(); }
  bool stop_requested() const { return stop_.load(); }
  bool fenced() const { return fenced_.load(); }
  std::string fence_reason() const;
  // When the lease was last renewed (the send instant of the last heartbeat answered; the
  // join counts as the first), on this process's steady clock. D4 fences one lease after it,
  // never earlier: tests check the fence against this instead of their own clock.
  TimePoint last_renewal() const { return TimePoint(Duration(last_renewal_.load())); }

  // --- recovery, docs/protocol.md steps 2-4 and 7 --------------------------------------------
  Answer report(uint64_t round, const StateReport& state);
  PlanQuery wait_plan(uint64_t round, Duration timeout);
  // Reports `state()` for the round this worker must join (the open one, or g+1 after
  // a planned change, or "the next" for a new worker) and waits for its plan, reporting
  // again whenever the round is revoked. A round not open yet (this worker left generation
  // g's recovery, whose revocation has not come) is waited for, not asked again: the next
  // report goes when a heartbeat reply shows the coordinator past g. `timeout` bounds the
  // whole wait, standby included (a spare waits until a hole opens: give it a long one).
  // Throws JobStopped, JobFinished, Refused (fenced) or CallTimeout.
  Plan next_plan(const std::function<StateReport()>& state, Duration timeout);
  // Step 7: ready(g), then wait until g runs (Running) or was revoked (Revoked).
  ReadyQuery ready(uint64_t generation, Duration timeout);

  // --- store: values are bytes (hex on the wire) --------------------------------------
  void kv_set(uint64_t generation, const std::string& key, const std::string& value);
  std::optional<std::string> kv_get(uint64_t generation, const std::string& key);
  // Waits until the key exists; throws CallTimeout naming the key at the deadline.
  std::string kv_wait(uint64_t generation, const std::string& key, Duration timeout);
  // Sets desired if the value is `expected` (nullopt: absent); returns whether it did.
  bool kv_cas(uint64_t generation, const std::string& key, const std::optional<std::string>& expected,
              const std::string& desired);

  // kind gpu_stuck: this worker's own GPU never reached an operation of `generation`
  // (comm's CommErrorInfo::device_stuck): the coordinator evicts this worker.
  Answer failure_report(uint64_t generation, int64_t step, std::optional<int> peer_slot, const std::string& cause,
                        FailureKind kind = FailureKind::comm);
  // The trainer's timing of one phase of its recovery into `generation`, for the summary.
  void phase_timing(uint64_t generation, RecoveryPhase phase, double ms);
  // This worker cannot run for a reason every worker and every restart would meet again
  // (its configuration): the coordinator STOPs the job with `error` (the launcher's final
  // line says it, nothing is restarted). Call it, then exit non-zero.
  void fatal(const std::string& error);
  // An --inject `step=` spec is about to fire in this worker (generation, step): recorded by
  // the coordinator (event `injected`, the summary's `fired`), so the launcher can tell a
  // spec whose step came but that never fired. Best effort: a coordinator that cannot be
  // reached does not stop the fault, and one that does not answer holds it one lease at
  // most (CallTimeout).
  void injected(uint64_t generation, int64_t step, const std::string& spec);
  // Graceful exit (after the last step or on stop): the connection closing is then no failure.
  void leave();
  void close();

 private:
  nlohmann::json call(const nlohmann::json& req, Duration timeout);
  // Where the coordinator is: host/port, or the leader etcd names (ConnectionLost: none).
  std::pair<std::string, int> locate() const;
  // One try: the member connection joins and its heartbeats start, then the caller connects.
  JoinInfo join_once(TimePoint deadline);
  void start_heartbeats(TimePoint joined);
  void heartbeat_loop(TimePoint joined);
  nlohmann::json heartbeat_message() const;
  // Acts on one heartbeat reply; false when it fenced this worker.
  bool on_heartbeat_reply(const HeartbeatReply& reply);
  void fence(const std::string& why);
  void stop_heartbeats();
  // Waits until a heartbeat reply shows a generation above g, this worker fences or the job
  // stops, or the deadline; returns whether the generation moved.
  bool wait_generation_above(uint64_t g, TimePoint deadline);
  void notify_generation_waiters();

  ClientOptions opt_;
  Connection member_, caller_;
  std::mutex call_mu_;  // one caller request at a time
  std::thread hb_thread_;
  std::atomic<bool> hb_stop_{false};
  int wake_fd_ = -1;  // an eventfd: stop_heartbeats() ends the heartbeat thread's wait at once
  std::mutex gen_mu_;  // with gen_cv_: wait_generation_above's wait for seen_, fenced_, stopped_
  std::condition_variable gen_cv_;
  std::atomic<int64_t> step_{-1};
  std::atomic<double> loss_{-1.0};          // < 0: none yet
  std::atomic<double> samples_per_s_{-1.0};  // < 0: none yet
  std::atomic<Duration::rep> last_renewal_{0};  // TimePoint since the clock's epoch
  std::atomic<uint64_t> active_{0}, seen_{0}, notified_{0};
  std::atomic<bool> reconfigure_{false}, stop_{false}, fenced_{false}, stopped_{false};
  std::string fence_reason_;
  mutable std::mutex cb_mu_;
  std::function<void(const Revocation&)> on_revoked_;
  std::function<void(const std::string&)> on_fenced_;
  std::function<void()> on_stopped_;
  std::function<Activity()> activity_;
  int64_t ckpt_failed_ = 0;  // set_checkpoint_failures, under cb_mu_
  std::string ckpt_error_;
};

}  // namespace rf::elastic
