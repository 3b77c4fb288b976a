#include "elastic/control_plane.h"

#include <algorithm>

#include "base/str.h"
#include "elastic/errors.h"

namespace rf::elastic {

std::string bounded_text(const std::string& text) {
  size_t n = std::min(text.size(), kMaxTextBytes);
  while (n < text.size() && n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  return text.substr(0, n);
}

void ControlPlane::on_revoked(std::function<void(const Revocation&)> cb) {
  std::lock_guard<std::mutex> l(cb_mu_);
  on_revoked_ = std::move(cb);
}
void ControlPlane::on_fenced(std::function<void(const std::string&)> cb) {
  std::lock_guard<std::mutex> l(cb_mu_);
  on_fenced_ = std::move(cb);
}
void ControlPlane::on_stopped(std::function<void()> cb) {
  std::lock_guard<std::mutex> l(cb_mu_);
  on_stopped_ = std::move(cb);
}
void ControlPlane::set_activity_source(std::function<Activity(Duration)> source) {
  std::lock_guard<std::mutex> l(cb_mu_);
  activity_ = std::move(source);
}

void ControlPlane::set_checkpoint_failures(int64_t failed, const std::string& last_error) {
  std::lock_guard<std::mutex> l(cb_mu_);
  ckpt_failed_ = failed;
  ckpt_error_ = bounded_text(last_error);
}

std::string ControlPlane::fence_reason() const {
  std::lock_guard<std::mutex> l(cb_mu_);
  return fence_reason_;
}

void ControlPlane::admitted(uint64_t generation) {
  fenced_ = false;
  active_ = 0;
  notified_ = 0;
  seen_ = generation;
}

Heartbeat ControlPlane::heartbeat_now() const {
  Heartbeat beat;
  beat.generation = active_.load();
  beat.step = step_.load();
  if (const double l = loss_.load(); l >= 0) beat.loss = l;
  if (const double r = samples_per_s_.load(); r >= 0) beat.samples_per_s = r;
  std::lock_guard<std::mutex> l(cb_mu_);
  if (activity_) beat.activity = activity_(frozen_total());
  if (ckpt_failed_ != 0) beat.ckpt_failed = ckpt_failed_, beat.ckpt_error = ckpt_error_;
  return beat;
}

Leave ControlPlane::leave_request() const {
  // The step goes with it: heartbeats carry it up to one heartbeat late, and the job's last
  // step (the launcher's report of --inject specs that never fired) must be exact.
  Leave req{step_.load(), std::nullopt, ""};
  std::lock_guard<std::mutex> l(cb_mu_);
  if (ckpt_failed_ != 0) req.ckpt_failed = ckpt_failed_, req.ckpt_error = ckpt_error_;
  return req;
}

bool ControlPlane::on_heartbeat_reply(const HeartbeatReply& reply) {
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

void ControlPlane::fence(const std::string& why) {
  fenced_ = true;
  cut_off();
  notify_generation_waiters();
  std::lock_guard<std::mutex> l(cb_mu_);
  fence_reason_ = why;
  if (on_fenced_) on_fenced_(why);
}

void ControlPlane::notify_generation_waiters() {
  { std::lock_guard<std::mutex> l(gen_mu_); }  // a waiter between its check and its wait sees the change
  gen_cv_.notify_all();
}

bool ControlPlane::wait_generation_above(uint64_t g, TimePoint deadline) {
  std::unique_lock<std::mutex> l(gen_mu_);
  gen_cv_.wait_until(l, deadline, [&] { return seen_.load() > g || fenced_.load() || stopped_.load(); });
  return seen_.load() > g;
}

Plan ControlPlane::next_plan(const std::function<StateReport()>& state, Duration timeout) {
  const TimePoint deadline = Clock::now() + timeout;
  const uint64_t active = active_.load();
  uint64_t round = active == 0 ? 0 : (seen_.load() > active ? seen_.load() : active + 1);
  std::string waited;  // why the last report was not taken, for the timeout's error
  for (int attempt = 0; attempt < 1000 && Clock::now() < deadline; ++attempt) {
    Answer a = report(round, state());
    if (a.kind == Answer::Fenced) throw Refused(rf::str("slot ", slot_, " is fenced: join again"));
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
        case PlanQuery::Fenced: throw Refused(rf::str("slot ", slot_, " is fenced: join again"));
        case PlanQuery::Stopped: throw JobStopped(rf::str("the coordinator stopped the job: ", q.error));
        case PlanQuery::Done: throw JobFinished(kJobFinishedReason);
        case PlanQuery::Pending: continue;  // still forming (or standby): keep waiting
      }
      break;  // revoked: report again for the new round
    }
  }
  throw CallTimeout(rf::str("slot ", slot_, " got no plan within ", std::chrono::duration<double>(timeout).count(),
                            " s", waited.empty() ? "" : rf::str(" (the coordinator's last answer: ", waited, ")")));
}

ReadyQuery ControlPlane::ready(uint64_t generation, Duration timeout) {
  const ReadyQuery q = ready_call(generation, timeout);
  if (q.kind == ReadyQuery::Running) active_ = generation, reconfigure_ = false;
  return q;
}

}  // namespace rf::elastic
