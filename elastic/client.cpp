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

std::string env_or_throw(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) throw rf::InvalidInput(rf::str("environment variable ", name, " is not set (the launcher sets it)"));
  return v;
}

int64_t env_int(const char* name, int64_t min, int64_t max) {
  std::string v = env_or_throw(name);
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (end != v.c_str() + v.size() || x < min || x > max)
    throw rf::InvalidInput(rf::str("environment variable ", name, "='", v, "' is not an integer in [", min, ", ", max, "]"));
  return x;
}

Duration ms(int64_t x) { return std::chrono::milliseconds(x); }

}  // namespace

ClientOptions ClientOptions::from_env() {
  ClientOptions o;
  if (const char* etcd = std::getenv("RINGFENCE_ETCD"); etcd && *etcd) {
    o.etcd = parse_etcd_endpoints(etcd);
    if (const char* job = std::getenv("RINGFENCE_JOB"); job && *job) o.job = job;
    control_prefix(o.job);  // checks the name
  } else {
    std::tie(o.host, o.port) = parse_host_port(env_or_throw("RINGFENCE_COORD"));
  }
  o.token = env_or_throw("RINGFENCE_TOKEN");
  o.slot = static_cast<int>(env_int("RINGFENCE_SLOT", 0, 1'000'000));
  o.incarnation = env_int("RINGFENCE_INCARNATION", 0, int64_t{1} << 53);
  return o;
}

Client::Client(ClientOptions options) : opt_(std::move(options)) {
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) throw rf::Error(rf::str("eventfd: ", std::strerror(errno)));
}

Client::~Client() {
  close();
  ::close(wake_fd_);
}

void Client::on_revoked(std::function<void(const Revocation&)> cb) {
  std::lock_guard<std::mutex> l(cb_mu_);
  on_revoked_ = std::move(cb);
}
void Client::on_fenced(std::function<void(const std::string&)> cb) {
  std::lock_guard<std::mutex> l(cb_mu_);
  on_fenced_ = std::move(cb);
}
void Client::on_stopped(std::function<void()> cb) {
  std::lock_guard<std::mutex> l(cb_mu_);
  on_stopped_ = std::move(cb);
}
void Client::set_activity_source(std::function<Activity()> source) {
  std::lock_guard<std::mutex> l(cb_mu_);
  activity_ = std::move(source);
}

std::string Client::fence_reason() const {
  std::lock_guard<std::mutex> l(cb_mu_);
  return fence_reason_;
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
  fenced_ = false;
  active_ = 0;
  notified_ = 0;
  seen_ = info.generation;
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

json Client::heartbeat_message() const {
  Heartbeat beat;
  beat.generation = active_.load();
  beat.step = step_.load();
  if (const double l = loss_.load(); l >= 0) beat.loss = l;
  if (const double r = samples_per_s_.load(); r >= 0) beat.samples_per_s = r;
  std::lock_guard<std::mutex> l(cb_mu_);
  if (activity_) beat.activity = activity_();
  if (ckpt_failed_ != 0) beat.ckpt_failed = ckpt_failed_, beat.ckpt_error = ckpt_error_;
  return encode_request(beat);
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
        member_.send(heartbeat_message(), lease.fence_at());
        lease.sent(now);
        continue;
      }
      const std::optional<json> m = member_.receive(d.until, wake_fd_);
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

bool Client::on_heartbeat_reply(const HeartbeatReply& reply) {
  if (reply.fenced) {
    fence("the coordinator evicted this worker");
    return false;
  }
  const uint64_t g = reply.generation;
  if (seen_.exchange(g) != g) notify_generation_waiters();
  // The flag belongs to the generation that runs now: a reply about an older one (or
  // about a round still forming) must not make us leave the new generation again.
  reconfigure_ = reply.reconfigure && reply.phase == Phase::Running && g == active_.load();
  stop_ = reply.stop;
  if (reply.phase == Phase::Stopped && !stopped_.exchange(true)) {
    notify_generation_waiters();
    std::lock_guard<std::mutex> l(cb_mu_);
    if (on_stopped_) on_stopped_();
  }
  const uint64_t active = active_.load();
  if (active != 0 && g > active && g > notified_.load()) {
    notified_ = g;
    Revocation r{g, reply.planned, reply.cause};
    std::lock_guard<std::mutex> l(cb_mu_);
    if (on_revoked_) on_revoked_(r);
  }
  return true;
}

void Client::notify_generation_waiters() {
  { std::lock_guard<std::mutex> l(gen_mu_); }  // a waiter between its check and its wait sees the change
  gen_cv_.notify_all();
}

bool Client::wait_generation_above(uint64_t g, TimePoint deadline) {
  std::unique_lock<std::mutex> l(gen_mu_);
  gen_cv_.wait_until(l, deadline, [&] { return seen_.load() > g || fenced_.load() || stopped_.load(); });
  return seen_.load() > g;
}

void Client::fence(const std::string& why) {
  fenced_ = true;
  // The coordinator must not count us as alive any more. Off the heartbeat thread (a lost
  // leader seen by a call) the connection is only shut down: that thread may be waiting on it.
  if (std::this_thread::get_id() == hb_thread_.get_id()) member_.close();
  else member_.shutdown();
  notify_generation_waiters();
  // A call the training thread waits in may be to a leader that is gone or cut off: it must
  // not wait its whole timeout, the worker has to join the next leader.
  if (!opt_.etcd.empty()) caller_.shutdown();
  std::function<void(const std::string&)> cb;
  {
    std::lock_guard<std::mutex> l(cb_mu_);
    fence_reason_ = why;
    cb = on_fenced_;
  }
  if (cb) cb(why);
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
  if (fenced_.load()) throw Refused(rf::str("slot ", opt_.slot, " is fenced (", fence_reason(), "): join again"));
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

Plan Client::next_plan(const std::function<StateReport()>& state, Duration timeout) {
  const TimePoint deadline = Clock::now() + timeout;
  const uint64_t active = active_.load();
  uint64_t round = active == 0 ? 0 : (seen_.load() > active ? seen_.load() : active + 1);
  std::string waited;  // why the last report was not taken, for the timeout's error
  for (int attempt = 0; attempt < 1000 && Clock::now() < deadline; ++attempt) {
    Answer a = report(round, state());
    if (a.kind == Answer::Fenced) throw Refused(rf::str("slot ", opt_.slot, " is fenced: join again"));
    if (a.kind == Answer::Finished) throw JobFinished(a.reason);
    if (a.kind == Answer::Stopped) throw JobStopped(rf::str("the coordinator stopped the job: ", a.reason));
    if (a.kind == Answer::Refused && active != 0) {
      // The round after `active` is not open: generation `active` still forms (this worker
      // left its recovery) or runs, and only its revocation opens the round. Asking again
      // before a heartbeat reply shows it would spin through the attempts in milliseconds.
      waited = a.reason;
      if (!wait_generation_above(std::max(active, a.generation), deadline)) continue;  // fenced, stopped or late
      round = seen_.load();
      continue;
    }
    if (a.kind != Answer::Accepted) {  // stale: follow the coordinator's number
      waited = a.reason;
      round = active == 0 ? 0 : (a.generation == active ? active + 1 : a.generation);
      continue;
    }
    while (Clock::now() < deadline) {
      PlanQuery q = wait_plan(a.generation, std::min<Duration>(deadline - Clock::now(), std::chrono::seconds(5)));
      switch (q.kind) {
        case PlanQuery::Ready:
          active_ = q.plan.generation;
          notified_ = std::max(notified_.load(), q.plan.generation);
          return q.plan;
        case PlanQuery::Revoked: round = q.generation; break;
        case PlanQuery::Fenced: throw Refused(rf::str("slot ", opt_.slot, " is fenced: join again"));
        case PlanQuery::Stopped: throw JobStopped(rf::str("the coordinator stopped the job: ", q.error));
        case PlanQuery::Done: throw JobFinished(kJobFinishedReason);
        case PlanQuery::Pending: continue;  // still forming (or standby): keep waiting
      }
      break;  // revoked: report again for the new round
    }
  }
  throw CallTimeout(rf::str("slot ", opt_.slot, " got no plan within ", std::chrono::duration<double>(timeout).count(),
                            " s", waited.empty() ? "" : rf::str(" (the coordinator's last answer: ", waited, ")")));
}

ReadyQuery Client::ready(uint64_t generation, Duration timeout) {
  const int64_t t = std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count();
  const ReadyQuery q = decode_reply_as<ReadyQuery>(
      call(encode_request(Ready{generation, t}), timeout + opt_.call_timeout));
  if (q.kind == ReadyQuery::Running) active_ = generation, reconfigure_ = false;
  return q;
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

void Client::fatal(const std::string& error) {
  // The protocol bounds text fields; cut at a UTF-8 character boundary.
  size_t n = std::min(error.size(), kMaxTextBytes);
  while (n < error.size() && n > 0 && (static_cast<unsigned char>(error[n]) & 0xC0) == 0x80) --n;
  call(encode_request(Fatal{error.substr(0, n)}), opt_.call_timeout);
}

void Client::set_checkpoint_failures(int64_t failed, const std::string& last_error) {
  // The protocol bounds text fields; cut at a UTF-8 character boundary.
  size_t n = std::min(last_error.size(), kMaxTextBytes);
  while (n < last_error.size() && n > 0 && (static_cast<unsigned char>(last_error[n]) & 0xC0) == 0x80) --n;
  std::lock_guard<std::mutex> l(cb_mu_);
  ckpt_failed_ = failed;
  ckpt_error_ = last_error.substr(0, n);
}

void Client::injected(uint64_t g, int64_t step, const std::string& spec) {
  // One lease at most: the fault waits on this call (for after_chunks, inside comm's hook),
  // and a coordinator that does not answer must not hold it longer than a failure takes to
  // be noticed.
  call(encode_request(Injected{g, step, spec}), opt_.lease);
}

void Client::leave() {
  // The step goes with it: heartbeats carry it up to one heartbeat late, and the job's
  // last step (the launcher's report of --inject specs that never fired) must be exact.
  Leave req{step_.load(), std::nullopt, ""};
  {
    std::lock_guard<std::mutex> l(cb_mu_);
    if (ckpt_failed_ != 0) req.ckpt_failed = ckpt_failed_, req.ckpt_error = ckpt_error_;
  }
  call(encode_request(req), opt_.call_timeout);
  close();
}

}  // namespace rf::elastic
