#pragma once
// AdminClient — the launcher's connection to the coordinator (role "launcher"): status
// for the live line and for evictions (a worker evicted as hung is SIGKILLed before it
// is replaced), exited (D1 seen by the launcher), stop (graceful stop, R5), summary.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "elastic/replies.h"
#include "elastic/wire.h"

namespace rf::elastic {

class AdminClient {
 public:
  AdminClient(std::string host, int port, std::string token, Duration timeout = std::chrono::seconds(10));
  // Several coordinator replicas: the leader of `job` in etcd, followed when it changes. A
  // call that meets a lost leader looks the new one up and is sent again, until `failover`
  // has passed (then it throws ConnectionLost).
  // A leader that does not answer a call within `timeout` is taken as lost (it may be cut
  // off), so the call goes to the next one in time.
  AdminClient(std::vector<std::string> etcd, std::string job, std::string token,
              Duration failover = std::chrono::seconds(20), Duration timeout = std::chrono::seconds(2));
  // With replicas: the phase the last leader committed to etcd (nullopt when none or
  // unreadable), for a launcher that finds no leader any more (the job ended while it was
  // following one).
  std::optional<Phase> committed_phase();
  StatusReply status();
  // What the coordinator knew of the process that exited (its exited_reply).
  using ExitedReply = rf::elastic::ExitedReply;
  ExitedReply exited(int slot, int64_t incarnation, int status, int64_t exited_wall_us);
  void stop();
  SummaryReply summary();

 private:
  nlohmann::json call(nlohmann::json req);
  void connect_leader(TimePoint deadline);
  std::vector<std::string> etcd_;
  std::string job_, token_;
  Duration failover_{};
  Duration timeout_;
  Connection conn_;
};

}  // namespace rf::elastic
