#pragma once
// Leadership — which `ringfence coord --etcd` replica leads a job, decided through etcd
// (docs/protocol.md "Control plane", docs/control-plane.md).
//
// Keys, under control_prefix(job) = "/ringfence/<job>/":
//   leader         {"id","addr"} on the leader's etcd lease. Created only when absent, so
//                  one replica holds it; it disappears when its lease is not kept alive.
//   state          the committed control state (elastic/control_state.h)
//   kv/<g>/<key>   the coordinator's key-value store
//
// A leader writes only through commit(): one etcd transaction guarded by the leader key's
// create revision. A replica whose key is gone (its lease expired while it was cut off)
// can never write again, even before it notices. So the generation in `state` is a fencing
// token that no two leaders can both issue.
//
// The lease is renewed on a thread. leading(now) turns false one margin before etcd could
// expire the lease, counted from when the last successful renewal was *sent* (earlier than
// etcd counts it): a leader stops serving before a standby can take its place.
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/error.h"
#include "elastic/etcd_client.h"

namespace rf::elastic {

// This replica does not lead (any more): why.
class NotLeader : public rf::Error {
 public:
  using rf::Error::Error;
};

struct LeadershipOptions {
  std::vector<std::string> endpoints;  // the etcd cluster's members
  std::string job = "ringfence";       // names the keys: several jobs may share one etcd
  // The leader's etcd lease. etcd counts whole seconds and rounds up to its own minimum
  // (2 s with its default election timeout); what it granted is lease(). A standby takes
  // over within about one lease of the leader's death; the leader keeps the lead through
  // etcd electing a new raft leader (a member killed) when that takes less than the lease.
  Duration lease = std::chrono::seconds(3);
};

// "/ringfence/<job>/". Throws rf::InvalidInput unless job is 1-64 of [A-Za-z0-9._-].
std::string control_prefix(const std::string& job);

struct LeaderInfo {
  std::string id, addr;  // addr: "host:port" of its coordinator
  int64_t create_revision = 0;
  int64_t lease = 0;  // the etcd lease the key is on
};

// Who leads `job` now (nullopt: nobody). Throws EtcdUnavailable.
std::optional<LeaderInfo> find_leader(EtcdClient& etcd, const std::string& job);

class Leadership {
 public:
  Leadership(LeadershipOptions options, std::string id);
  ~Leadership();  // resign()
  Leadership(const Leadership&) = delete;
  Leadership& operator=(const Leadership&) = delete;

  // Blocks until this replica leads, serving at `addr` (true), or until stop() says so
  // (false). etcd being down is waited out, not an error: `unavailable` (if given) hears
  // why, at the first failed call and then at most every 10 s.
  bool campaign(const std::string& addr, const std::function<bool()>& stop,
                const std::function<void(const std::string&)>& unavailable = {});
  bool leading(TimePoint now) const;
  // Who leads now (nullopt: nobody). Throws EtcdUnavailable.
  std::optional<LeaderInfo> leader_now();
  // Ends `leader`'s term at once by revoking its lease (its key goes with it), for a standby
  // that saw the leader's process end: its watch connection closed. Safe however wrong that
  // is: a leader whose key is gone cannot commit any more (commit() is guarded) and steps
  // down at its next renewal. Throws EtcdUnavailable.
  void depose(const LeaderInfo& leader);
  std::string lost_reason() const;

  // Applies `ops` (keys relative to the prefix) in one transaction, only while this replica
  // leads. Retries an unanswered call until leading() ends. Throws NotLeader.
  void commit(std::vector<EtcdOp> ops);
  // Keys starting with `rel_prefix` (relative), in key order; keys in the result are relative.
  std::vector<EtcdKv> load(const std::string& rel_prefix);
  // Gives the lease back at once (the leader key goes with it), so a standby need not wait
  // for it to expire. Best effort; idempotent.
  void resign();

  Duration lease() const { return granted_; }
  const std::string& prefix() const { return prefix_; }
  const std::string& id() const { return id_; }

 private:
  void keepalive_loop();
  void lose(const std::string& why);

  LeadershipOptions opt_;
  std::string id_, prefix_;
  EtcdClient etcd_;  // the caller's thread: campaign, commit, load
  EtcdClient ka_;    // the keep-alive thread
  Duration granted_;
  int64_t lease_id_ = 0;
  int64_t create_revision_ = 0;
  std::atomic<Duration::rep> valid_until_{0};  // TimePoint since the clock's epoch
  std::atomic<bool> lost_{false};
  mutable std::mutex mu_;
  std::string lost_reason_;
  std::string last_renew_error_;
  bool ka_stop_ = false;
  std::condition_variable ka_cv_;
  std::thread ka_thread_;
};

}  // namespace rf::elastic
