#include "elastic/client.h"

#include "elastic/auth.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "base/str.h"
#include "base/thread_sched.h"
#include "elastic/coordinator_replies.h"
#include "elastic/etcd_client.h"
#include "elastic/frame.h"
#include "elastic/leadership.h"
#include "elastic/lease_renewal.h"
#include "elastic/messages.h"
#include "elastic/replies.h"

namespace rf::elastic {

using nlohmann::json;

namespace {
Duration ms(int64_t x) { return std::chrono::milliseconds(x); }
}  // namespace

ClientOptions ClientOptions::from(const WorkerEnv& env) {
  if (!env.launched())
    throw rf::InvalidInput("environment variable RINGFENCE_COORD is not set (the launcher sets it)");
  ClientOptions o;
  if (!env.etcd.empty()) {
    o.etcd = parse_etcd_endpoints(env.etcd);
    if (!env.job.empty()) o.job = env.job;
    control_prefix(o.job);  // checks the name
  } else {
    std::tie(o.host, o.port) = parse_host_port(env.coord);
  }
  o.token = env.token;
  o.slot = env.slot;
  o.incarnation = env.incarnation;
  return o;
}

Client::Client(ClientOptions options) : ControlPlane(options.slot), opt_(std::move(options)) {
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) throw rf::Error(rf::str("eventfd: ", std::strerror(errno)));
}

Client::~Client() {
  close();
  ::close(wake_fd_);
}

std::pair<std::string, int> Client::locate() const {
  if (opt_.etcd.empty()) return {opt_.host, opt_.port};
  EtcdClient etcd(EtcdOptions{opt_.etcd, std::chrono::seconds(1)});
  std::optional<LeaderInfo> leader;
  try {
    leader = find_leader(etcd, opt_.job);
  } catch (const EtcdUnavailable& e) {
    throw ConnectionLost(e.what());
  }
  if (!leader) throw ConnectionLost(rf::str("no coordinator leads job '", opt_.job, "' (etcd has no leader key)"));
  return parse_host_port(leader->addr);
}

JoinInfo Client::join() {
  stop_heartbeats();
  const TimePoint deadline = Clock::now() + opt_.connect_timeout;
  while (true) {
    try {
      return join_once(deadline);
    } catch (const rf::Error& e) {
      stop_heartbeats();
      member_.close();
      caller_.close();
      if (!dynamic_cast<const ConnectionLost*>(&e) && !dynamic_cast<const CallTimeout*>(&e)) throw;
      // With several replicas the leader may be changing: look it up again until the
      // deadline (a poll interval, not a wait for something a notification could tell).
      if (opt_.etcd.empty() || Clock::now() >= deadline) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
}

JoinInfo Client::join_once(TimePoint deadline) {
  member_.close();
  caller_.close();
  const auto [host, port] = locate();
  // A leader etcd still names may be dead or cut off (its key lasts one lease): one try at a
  // time, then look again.
  if (!opt_.etcd.empty()) deadline = std::min(deadline, Clock::now() + std::chrono::milliseconds(500));
  member_.connect(host, port, deadline, opt_.etcd.empty());
  json hello = {{"type", "hello"}, {"role", "member"}, {"slot", opt_.slot}, {"incarnation", opt_.incarnation}};
  // A spare or a restart that arrives after every member left gets JobFinished (the
  // coordinator's "finished" code): nothing to do, not an error.
  TimePoint joined;
  const WelcomeReply welcome = decode_reply_as<WelcomeReply>(authenticate(member_, opt_.token, hello, deadline, &joined));
  if (!welcome.phase || !welcome.heartbeat_ms || !welcome.lease_ms)
    throw ProtocolError("welcome: a member's welcome names the phase, heartbeat_ms and lease_ms");
  JoinInfo info;
  info.generation = welcome.generation;
  info.phase = to_string(*welcome.phase);
  info.target_world = welcome.target_world;
  opt_.heartbeat = ms(*welcome.heartbeat_ms);
  opt_.lease = ms(*welcome.lease_ms);
  admitted(info.generation);
  // The coordinator's lease runs from the join: heartbeats start now, not after the caller
  // connection is made too (on a lossy link each lost SYN of it costs a second).
  start_heartbeats(joined);
  caller_.connect(host, port, deadline, opt_.etcd.empty());
  hello["role"] = "caller";
  authenticate(caller_, opt_.token, hello, deadline);
  return info;
}

void Client::start_heartbeats(TimePoint joined) {
  uint64_t drained;
  while (::read(wake_fd_, &drained, sizeof drained) > 0) {
  }
  hb_stop_ = false;
  last_renewal_ = joined.time_since_epoch().count();
  hb_thread_ = std::thread([this, joined] { heartbeat_loop(joined); });
}

void Client::heartbeat_loop(TimePoint joined) {
  // The lease is renewed from here: it must run on time on an overloaded machine
  // (base/thread_sched.h); it sleeps almost always, so a real-time priority costs nothing.
  raise_to_control_plane();
  // D2/D4: heartbeats leave on the period's clock whatever is in flight, and the lease counts
  // from the send instant of each one answered (elastic/lease_renewal.h).
  LeaseRenewal lease({opt_.heartbeat, opt_.lease}, joined);
  while (!hb_stop_.load()) {
    const TimePoint now = Clock::now();
    const RenewalDecision d = lease.decide(now);
    try {
      if (d.kind == RenewalDecision::Fence) {
        fence(rf::str("could not renew the lease: no heartbeat answered within one lease (",
                      std::chrono::duration_cast<std::chrono::milliseconds>(opt_.lease).count(),
                      " ms) of the last renewal; ", lease.in_flight(), " unanswered"));
        return;
      }
      if (d.kind == RenewalDecision::Send) {
        member_.send(encode_request(heartbeat_now()), lease.fence_at());
        lease.sent(now);
        continue;
      }
      const std::optional<json> m = member_.receive(d.until, wake_fd_);
      // Back later than it asked (whatever woke it): the process did not run when it was
      // due. A freeze during a send or a reply's handling is caught here too: the next
      // wait's deadline has passed by then. Only a freeze shorter than a period can be missed.
      note_overslept(Clock::now() - d.until);
      if (!m) continue;
      const HeartbeatReply reply = decode_reply_as<HeartbeatReply>(*m);
      const std::optional<TimePoint> renewed = lease.answered();
      if (!renewed) throw ProtocolError("a heartbeat reply came with no heartbeat in flight");
      last_renewal_ = renewed->time_since_epoch().count();
      if (!on_heartbeat_reply(reply)) return;
    } catch (const rf::Error& e) {
      fence(rf::str("could not renew the lease: ", e.what()));
      return;
    }
  }
}

// Fencing (ControlPlane::fence): the coordinator must not count us as alive any more. Off
// the heartbeat thread (a lost leader seen by a call) the connection is only shut down: that
// thread may be waiting on it. A call the training thread waits in may be to a leader that
// is gone or cut off: it must not wait its whole timeout, the worker has to join the next
// leader.
void Client::cut_off() {
  if (std::this_thread::get_id() == hb_thread_.get_id()) member_.close();
  else member_.shutdown();
  if (!opt_.etcd.empty()) caller_.shutdown();
}

void Client::stop_heartbeats() {
  hb_stop_ = true;
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof one);
  if (hb_thread_.joinable() && hb_thread_.get_id() != std::this_thread::get_id()) hb_thread_.join();
}

void Client::close() {
  stop_heartbeats();
  member_.close();
  caller_.close();
}

json Client::call(const json& req, Duration timeout) {
  std::lock_guard<std::mutex> l(call_mu_);
  if (opt_.etcd.empty()) return caller_.call(req, Clock::now() + timeout);
  if (fenced()) throw Refused(rf::str("slot ", opt_.slot, " is fenced (", fence_reason(), "): join again"));
  try {
    return caller_.call(req, Clock::now() + timeout);
  } catch (const ConnectionLost& e) {
    fence(rf::str("lost the leading coordinator: ", e.what()));
    throw Refused(rf::str("slot ", opt_.slot, " is fenced (lost the leading coordinator): join again"));
  }
}

Answer Client::report(uint64_t round, const StateReport& s) {
  const Report req{round, s.has_state, s.has_state ? s.step : -1, s.has_state ? s.digest : "", s.comm_generation};
  return decode_reply_as<Answer>(call(encode_request(req), opt_.call_timeout));
}

PlanQuery Client::wait_plan(uint64_t round, Duration timeout) {
  const int64_t t = std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count();
  return decode_reply_as<PlanQuery>(
      call(encode_request(PlanRequest{round, t}), timeout + opt_.call_timeout));
}

ReadyQuery Client::ready_call(uint64_t generation, Duration timeout) {
  const int64_t t = std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count();
  return decode_reply_as<ReadyQuery>(call(encode_request(Ready{generation, t}), timeout + opt_.call_timeout));
}

void Client::kv_set(uint64_t g, const std::string& key, const std::string& value) {
  call(encode_request(KvSet{g, key, hex_encode(value)}), opt_.call_timeout);
}

std::optional<std::string> Client::kv_get(uint64_t g, const std::string& key) {
  const auto r = decode_reply_as<KvValueReply>(call(encode_request(KvGet{g, key}), opt_.call_timeout));
  if (!r.value_hex) return std::nullopt;
  return hex_decode(*r.value_hex);
}

std::string Client::kv_wait(uint64_t g, const std::string& key, Duration timeout) {
  const int64_t t = std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count();
  const auto r = decode_reply_as<KvValueReply>(
      call(encode_request(KvWait{g, key, t}), timeout + opt_.call_timeout));
  if (!r.value_hex)
    throw CallTimeout(rf::str("key '", key, "' of generation ", g, " did not appear within ",
                              std::chrono::duration<double>(timeout).count(), " s"));
  return hex_decode(*r.value_hex);
}

bool Client::kv_cas(uint64_t g, const std::string& key, const std::optional<std::string>& expected,
                    const std::string& desired) {
  const KvCas req{g, key, expected ? std::optional(hex_encode(*expected)) : std::nullopt, hex_encode(desired)};
  return decode_reply_as<KvCasReply>(call(encode_request(req), opt_.call_timeout)).swapped;
}

Answer Client::failure_report(uint64_t g, int64_t step, std::optional<int> peer, const std::string& cause,
                              FailureKind kind) {
  return decode_reply_as<Answer>(call(encode_request(FailureReport{g, step, peer, cause, kind}), opt_.call_timeout));
}

void Client::phase_timing(uint64_t g, RecoveryPhase phase, double ms_) {
  call(encode_request(PhaseTiming{g, phase, ms_}), opt_.call_timeout);
}

void Client::fatal(const std::string& error) { call(encode_request(Fatal{bounded_text(error)}), opt_.call_timeout); }

void Client::injected(uint64_t g, int64_t step, const std::string& spec) {
  // One lease at most: the fault waits on this call (for after_chunks, inside comm's hook),
  // and a coordinator that does not answer must not hold it longer than a failure takes to
  // be noticed.
  call(encode_request(Injected{g, step, spec}), opt_.lease);
}

void Client::leave() {
  call(encode_request(leave_request()), opt_.call_timeout);
  close();
}

}  // namespace rf::elastic
