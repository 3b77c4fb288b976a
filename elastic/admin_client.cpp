#include "elastic/admin_client.h"

#include "elastic/auth.h"

#include "base/str.h"
#include "elastic/errors.h"
#include "elastic/control_state.h"
#include "elastic/etcd_client.h"
#include "elastic/leadership.h"
#include "elastic/messages.h"

#include <thread>

namespace rf::elastic {

using nlohmann::json;

AdminClient::AdminClient(std::string host, int port, std::string token, Duration timeout) : timeout_(timeout) {
  const TimePoint deadline = Clock::now() + timeout;
  conn_.connect(host, port, deadline);
  authenticate(conn_, token, {{"type", "hello"}, {"role", "launcher"}}, deadline);
}

AdminClient::AdminClient(std::vector<std::string> etcd, std::string job, std::string token, Duration failover,
                         Duration timeout)
    : etcd_(std::move(etcd)), job_(std::move(job)), token_(std::move(token)), failover_(failover), timeout_(timeout) {
  connect_leader(Clock::now() + failover_);
}

void AdminClient::connect_leader(TimePoint deadline) {
  EtcdClient etcd(EtcdOptions{etcd_, std::chrono::seconds(1)});
  std::string last;
  while (true) {
    try {
      const auto leader = find_leader(etcd, job_);
      if (!leader) throw ConnectionLost(rf::str("no coordinator leads job '", job_, "' (etcd has no leader key)"));
      const auto [host, port] = parse_host_port(leader->addr);
      // One try per leader etcd names: it may be dead or cut off while its key lasts.
      const TimePoint attempt = std::min(deadline, Clock::now() + std::chrono::seconds(1));
      conn_.connect(host, port, attempt, false);
      authenticate(conn_, token_, {{"type", "hello"}, {"role", "launcher"}}, attempt);
      return;
    } catch (const rf::Error& e) {
      const bool transient = dynamic_cast<const ConnectionLost*>(&e) || dynamic_cast<const CallTimeout*>(&e) ||
                             dynamic_cast<const EtcdUnavailable*>(&e);
      if (!transient) throw;
      last = e.what();
    }
    if (Clock::now() >= deadline)
      throw ConnectionLost(rf::str("no leading coordinator of job '", job_, "' answered within ",
                                   std::chrono::duration<double>(failover_).count(), " s: ", last));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a poll interval
  }
}

json AdminClient::call(json req) {
  if (etcd_.empty()) return conn_.call(req, Clock::now() + timeout_);
  try {
    return conn_.call(req, Clock::now() + timeout_);
  } catch (const rf::Error& e) {
    if (!dynamic_cast<const ConnectionLost*>(&e) && !dynamic_cast<const CallTimeout*>(&e)) throw;
  }
  // The leader was lost: follow the next one and ask it.
  connect_leader(Clock::now() + failover_);
  return conn_.call(req, Clock::now() + timeout_);
}
StatusReply AdminClient::status() { return decode_reply_as<StatusReply>(call(encode_request(Status{}))); }
AdminClient::ExitedReply AdminClient::exited(int slot, int64_t inc, int status, int64_t wall) {
  return decode_reply_as<ExitedReply>(call(encode_request(Exited{slot, inc, status, wall})));
}
std::optional<Phase> AdminClient::committed_phase() {
  if (etcd_.empty()) return std::nullopt;
  try {
    EtcdClient etcd(EtcdOptions{etcd_, std::chrono::seconds(1)});
    const auto kv = etcd.get(control_prefix(job_) + "state");
    return kv ? decode_control_state(kv->value).phase : std::nullopt;
  } catch (const rf::Error&) {
    return std::nullopt;
  }
}

void AdminClient::stop() { call(encode_request(StopJob{})); }
SummaryReply AdminClient::summary() { return decode_reply_as<SummaryReply>(call(encode_request(Summary{}))); }

}  // namespace rf::elastic
