#include "elastic/sim_control.h"

#include <algorithm>
#include <utility>

#include "base/str.h"
#include "elastic/errors.h"

namespace rf::elastic {

namespace {
// The simulated clock starts far from the epoch, so "since" arithmetic never goes below it.
constexpr Duration kStart = std::chrono::hours(1);

HeartbeatReply reply_of(const HeartbeatResult& h) {
  return HeartbeatReply{h.fenced, h.generation, h.phase, h.reconfigure, h.stop, h.planned, h.cause};
}

// A refused ready, as the TCP client decodes the coordinator's refusal (elastic/replies.cpp).
ReadyQuery ready_refusal(const Answer& a) {
  ReadyQuery q;
  q.generation = a.generation;
  q.error = a.reason;
  if (a.kind == Answer::Stale) q.kind = ReadyQuery::Revoked;
  else if (a.kind == Answer::Fenced) q.kind = ReadyQuery::Fenced;
  else if (a.kind == Answer::Stopped) q.kind = ReadyQuery::Stopped;
  return q;
}
}  // namespace

// ---- SimCoordinator -------------------------------------------------------------------

SimCoordinator::SimCoordinator(MembershipOptions options)
    : now_(TimePoint(kStart)), m_(std::move(options), TimePoint(kStart)) {}

std::shared_ptr<SimControl> SimCoordinator::worker(int slot, int64_t incarnation) {
  auto w = std::make_shared<SimControl>(*this, WorkerId{slot, incarnation});
  std::lock_guard<std::mutex> l(mu_);
  workers_.push_back(w);
  return w;
}

void SimCoordinator::drain_locked() {
  for (auto& t : m_.take_transitions()) log_.push_back(std::move(t));
  for (const WorkerId& w : m_.take_evictions()) evictions_.push_back(w);
  if (m_.generation() >= 2) kv_.drop_generations_below(m_.generation() - 1);
}

void SimCoordinator::after_event() {
  // Replies go out in order: one delivery at a time (a worker's replies never overtake).
  std::lock_guard<std::mutex> order(deliver_mu_);
  std::vector<std::pair<std::shared_ptr<SimControl>, HeartbeatReply>> replies;
  {
    std::lock_guard<std::mutex> l(mu_);
    m_.tick(now_);
    drain_locked();
    for (const auto& weak : workers_)
      if (auto w = weak.lock())
        if (auto r = w->beat_locked()) replies.emplace_back(std::move(w), *r);
    drain_locked();
    ++changes_;
  }
  cv_.notify_all();
  for (auto& [w, r] : replies) w->on_heartbeat_reply(r);
}

void SimCoordinator::advance(Duration d) {
  {
    std::lock_guard<std::mutex> order(deliver_mu_);
    std::lock_guard<std::mutex> l(mu_);
    now_ += d;
    for (const auto& weak : workers_)
      if (auto w = weak.lock()) w->beat_locked();  // the leases renewed first, then judged
  }
  after_event();
}

bool SimCoordinator::advance_if_quiet(Duration d, const std::vector<WorkerId>& stuck, Quiet quiet) {
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& weak : workers_) {
      auto w = weak.lock();
      if (!w || w->killed_ || w->closed_) continue;
      if (!w->connected_) return false;  // joining
      if (w->paused_) continue;
      if (std::find(stuck.begin(), stuck.end(), w->id_) != stuck.end()) continue;
      // Blocked, and it saw the latest change (a woken call may not have run yet).
      if (quiet == Quiet::Idle && (w->blocked_ == 0 || w->looked_at_ != changes_)) return false;
      if (quiet == Quiet::NoCompute && w->heartbeat_now().activity.kind == Activity::Compute) return false;
    }
  }
  advance(d);
  return true;
}

void SimCoordinator::kill(WorkerId id) {
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& weak : workers_) {
      auto w = weak.lock();
      if (!w || !(w->id_ == id)) continue;
      w->killed_ = true;
      if (w->connected_) m_.connection_lost(id, now_);
      w->connected_ = false;
    }
    drain_locked();
  }
  after_event();
}

void SimCoordinator::pause(WorkerId id, bool paused) {
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& weak : workers_)
    if (auto w = weak.lock(); w && w->id_ == id) w->paused_ = paused;
}

TimePoint SimCoordinator::now() const {
  std::lock_guard<std::mutex> l(mu_);
  return now_;
}
Phase SimCoordinator::phase() const {
  std::lock_guard<std::mutex> l(mu_);
  return m_.phase();
}
uint64_t SimCoordinator::generation() const {
  std::lock_guard<std::mutex> l(mu_);
  return m_.generation();
}
int SimCoordinator::running_world() const {
  std::lock_guard<std::mutex> l(mu_);
  return m_.phase() == Phase::Running && m_.running_plan() ? m_.running_plan()->world() : 0;
}
std::vector<RecoveryRecord> SimCoordinator::recoveries() const {
  std::lock_guard<std::mutex> l(mu_);
  return m_.recoveries();
}
std::vector<Transition> SimCoordinator::transitions() const {
  std::lock_guard<std::mutex> l(mu_);
  return log_;
}
std::string SimCoordinator::describe() const {
  std::lock_guard<std::mutex> l(mu_);
  std::string s;
  for (const auto& weak : workers_)
    if (auto w = weak.lock())
      s += rf::str("worker ", w->id_.slot, "/", w->id_.incarnation, w->connected_ ? " connected" : "",
                   w->closed_ ? " closed" : "", w->killed_ ? " killed" : "", w->paused_ ? " paused" : "",
                   w->blocked_ > 0 ? rf::str(" blocked in: ", w->blocked_in_) : std::string(), "\n");
  return s;
}

std::vector<WorkerId> SimCoordinator::take_evictions() {
  std::lock_guard<std::mutex> l(mu_);
  return std::exchange(evictions_, {});
}

// ---- SimControl -----------------------------------------------------------------------

SimControl::SimControl(SimCoordinator& coordinator, WorkerId id) : ControlPlane(id.slot), c_(coordinator), id_(id) {}

void SimControl::wait(std::unique_lock<std::mutex>& l, TimePoint deadline, std::string what) {
  ++blocked_;
  blocked_in_ = std::move(what);
  looked_at_ = c_.changes_;
  c_.cv_.wait_until(l, deadline);
  --blocked_;
}

void SimControl::check_alive() const {
  if (killed_) throw ConnectionLost(rf::str("worker ", id_.slot, "/", id_.incarnation, " was killed"));
}

std::optional<HeartbeatReply> SimControl::beat_locked() {
  if (!connected_ || killed_ || paused_) return std::nullopt;
  const Heartbeat b = heartbeat_now();
  // The worker measures its activity on the real clock; the coordinator judges it on the
  // simulated one: an activity counts from when its first heartbeat said it began.
  Activity a = b.activity;
  if (!last_activity_ || last_activity_->kind != a.kind || last_activity_->where != a.where)
    activity_since_ = c_.now_ - a.elapsed;
  last_activity_ = a;
  a.elapsed = c_.now_ - activity_since_;
  a.runnable = Duration::zero();
  a.frozen = Duration::zero();
  return reply_of(c_.m_.heartbeat(id_, b.generation, b.step, c_.now_, a));
}

JoinInfo SimControl::join() {
  JoinInfo info;
  {
    std::lock_guard<std::mutex> l(c_.mu_);
    check_alive();
    const JoinResult j = c_.m_.join(id_, c_.now_);
    c_.drain_locked();
    if (!j.ok()) {
      if (j.kind == Answer::Finished) throw JobFinished(j.reason);
      throw Refused(rf::str("join refused: ", j.reason));
    }
    info = {j.generation, to_string(j.phase), c_.m_.plan() ? c_.m_.plan()->world() : 0};
    connected_ = true;
    closed_ = false;
    last_activity_.reset();
    admitted(info.generation);
  }
  c_.after_event();
  return info;
}

Answer SimControl::report(uint64_t round, const StateReport& state) {
  Answer a;
  {
    std::lock_guard<std::mutex> l(c_.mu_);
    check_alive();
    a = c_.m_.report(id_, round, state, c_.now_);
  }
  c_.after_event();
  return a;
}

PlanQuery SimControl::wait_plan(uint64_t round, Duration timeout) {
  const TimePoint deadline = Clock::now() + timeout;
  std::unique_lock<std::mutex> l(c_.mu_);
  for (;;) {
    check_alive();
    PlanQuery q = c_.m_.plan_for(id_, round);
    if (q.kind != PlanQuery::Pending || Clock::now() >= deadline) return q;
    wait(l, deadline, rf::str("plan of round ", round));
  }
}

ReadyQuery SimControl::ready_call(uint64_t generation, Duration timeout) {
  const TimePoint deadline = Clock::now() + timeout;
  {
    std::lock_guard<std::mutex> l(c_.mu_);
    check_alive();
    const Answer a = c_.m_.ready(id_, generation, c_.now_);
    if (!a.ok()) return ready_refusal(a);
  }
  c_.after_event();
  std::unique_lock<std::mutex> l(c_.mu_);
  for (;;) {
    check_alive();
    ReadyQuery q = c_.m_.ready_state(id_, generation);
    if (q.kind != ReadyQuery::Pending || Clock::now() >= deadline) return q;
    wait(l, deadline, rf::str("ready of generation ", generation));
  }
}

void SimControl::kv_set(uint64_t generation, const std::string& key, const std::string& value) {
  {
    std::lock_guard<std::mutex> l(c_.mu_);
    check_alive();
    c_.kv_.set(generation, key, value);
    ++c_.changes_;
  }
  c_.cv_.notify_all();
}

std::optional<std::string> SimControl::kv_get(uint64_t generation, const std::string& key) {
  std::lock_guard<std::mutex> l(c_.mu_);
  check_alive();
  return c_.kv_.get(generation, key);
}

std::string SimControl::kv_wait(uint64_t generation, const std::string& key, Duration timeout) {
  const TimePoint deadline = Clock::now() + timeout;
  std::unique_lock<std::mutex> l(c_.mu_);
  for (;;) {
    check_alive();
    if (auto v = c_.kv_.get(generation, key)) return *v;
    if (Clock::now() >= deadline)
      throw CallTimeout(rf::str("key '", key, "' of generation ", generation, " did not appear within ",
                                std::chrono::duration<double>(timeout).count(), " s"));
    wait(l, deadline, rf::str("key ", key, " of generation ", generation));
  }
}

bool SimControl::kv_cas(uint64_t generation, const std::string& key, const std::optional<std::string>& expected,
                        const std::string& desired) {
  bool swapped = false;
  {
    std::lock_guard<std::mutex> l(c_.mu_);
    check_alive();
    swapped = c_.kv_.compare_and_set(generation, key, expected, desired).first;
    ++c_.changes_;
  }
  c_.cv_.notify_all();
  return swapped;
}

Answer SimControl::failure_report(uint64_t generation, int64_t step, std::optional<int> peer_slot,
                                  const std::string& cause, FailureKind kind) {
  Answer a;
  {
    std::lock_guard<std::mutex> l(c_.mu_);
    check_alive();
    a = c_.m_.failure_report(id_, generation, step, peer_slot, bounded_text(cause), c_.now_, kind);
  }
  c_.after_event();
  return a;
}

void SimControl::phase_timing(uint64_t generation, RecoveryPhase phase, double ms) {
  std::lock_guard<std::mutex> l(c_.mu_);
  check_alive();
  c_.m_.phase_timing(id_, generation, phase, ms);
}

void SimControl::fatal(const std::string& error) {
  {
    std::lock_guard<std::mutex> l(c_.mu_);
    check_alive();
    c_.m_.worker_fatal(id_, bounded_text(error), c_.now_);
  }
  c_.after_event();
}

void SimControl::injected(uint64_t generation, int64_t step, const std::string& spec) {
  std::lock_guard<std::mutex> l(c_.mu_);
  check_alive();
  c_.m_.worker_injected(id_, generation, step, spec, c_.now_);
}

void SimControl::leave() {
  const Leave req = leave_request();
  {
    std::lock_guard<std::mutex> l(c_.mu_);
    check_alive();
    c_.m_.leave(id_, c_.now_, req.step);
  }
  c_.after_event();
  close();
}

bool SimControl::drop_connection_locked() {
  if (!connected_) return false;
  connected_ = false;
  c_.m_.connection_lost(id_, c_.now_);
  c_.drain_locked();
  return true;
}

void SimControl::close() {
  {
    std::lock_guard<std::mutex> l(c_.mu_);
    closed_ = true;
    if (!drop_connection_locked()) return;
  }
  c_.after_event();
}

void SimControl::cut_off() {
  // On the delivering thread (no lock held): the connection closes as the Client's does.
  {
    std::lock_guard<std::mutex> l(c_.mu_);
    if (!drop_connection_locked()) return;
    ++c_.changes_;
  }
  c_.cv_.notify_all();
}

}  // namespace rf::elastic
