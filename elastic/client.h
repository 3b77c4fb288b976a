#pragma once
// Client — the ControlPlane (elastic/control_plane.h) over TCP to `ringfence coord`.
//
// Two connections: the *member* connection carries join (in its hello) and the heartbeat
// thread; its closing is how the coordinator sees this process die (D1). The *caller*
// connection carries the blocking calls of the training thread (report, plan, ready,
// store, failure report), so a long wait for a plan never delays a heartbeat.
//
// The heartbeat thread renews the lease: a heartbeat every `heartbeat`, without waiting for
// the previous reply, each carrying the current step and what the training thread is doing
// (the coordinator evicts a member stuck past its stall bound, elastic/liveness.h). A
// renewal counts from when its heartbeat left (elastic/lease_renewal.h). Each reply goes to
// ControlPlane::on_heartbeat_reply (revocation, eviction, stop). When it cannot renew for
// one `lease` it self-fences (D4) and stops heartbeating; the worker must stop applying
// steps and join() again (it comes back as a new member).
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "elastic/control_plane.h"
#include "elastic/membership_types.h"
#include "elastic/errors.h"
#include "elastic/replies.h"
#include "elastic/wire.h"
#include "elastic/worker_env.h"

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

  // The coordinator `ringfence run` names (RINGFENCE_COORD host:port, or RINGFENCE_ETCD's
  // endpoints and RINGFENCE_JOB) and this worker's token, slot and incarnation. Throws
  // rf::InvalidInput naming a missing or bad variable.
  static ClientOptions from(const WorkerEnv& env);
  static ClientOptions from_env() { return from(read_worker_env()); }
};

class Client final : public ControlPlane {
 public:
  explicit Client(ClientOptions options);
  ~Client() override;

  // Connects both connections, joins (slot, incarnation), starts the heartbeat thread.
  JoinInfo join() override;
  // When the lease was last renewed (the send instant of the last heartbeat answered; the
  // join counts as the first), on this process's steady clock. D4 fences one lease after it,
  // never earlier: tests check the fence against this instead of their own clock.
  TimePoint last_renewal() const { return TimePoint(Duration(last_renewal_.load())); }

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
  // A coordinator that cannot be reached does not stop the fault, and one that does not
  // answer holds it one lease at most (CallTimeout).
  void injected(uint64_t generation, int64_t step, const std::string& spec) override;
  void leave() override;
  void close() override;

 private:
  ReadyQuery ready_call(uint64_t generation, Duration timeout) override;
  void cut_off() override;
  nlohmann::json call(const nlohmann::json& req, Duration timeout);
  // Where the coordinator is: host/port, or the leader etcd names (ConnectionLost: none).
  std::pair<std::string, int> locate() const;
  // One try: the member connection joins and its heartbeats start, then the caller connects.
  JoinInfo join_once(TimePoint deadline);
  void start_heartbeats(TimePoint joined);
  void heartbeat_loop(TimePoint joined);
  void stop_heartbeats();

  ClientOptions opt_;
  Connection member_, caller_;
  std::mutex call_mu_;  // one caller request at a time
  std::thread hb_thread_;
  std::atomic<bool> hb_stop_{false};
  int wake_fd_ = -1;  // an eventfd: stop_heartbeats() ends the heartbeat thread's wait at once
  std::atomic<Duration::rep> last_renewal_{0};  // TimePoint since the clock's epoch
};

}  // namespace rf::elastic
