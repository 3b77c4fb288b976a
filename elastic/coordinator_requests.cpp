// The coordinator's requests: admission (hello, challenge, auth) and every request of
// an admitted connection, answered at once or parked until its reply is due (try_pending).
#include <algorithm>

#include "base/str.h"
#include "elastic/auth.h"
#include "elastic/coordinator_impl.h"
#include "elastic/replies.h"
#include "elastic/token.h"

namespace rf::elastic {

using nlohmann::json;

// A writer's count of failed disk checkpoints (a heartbeat's or a leave's): logged when it grew.
void Coordinator::Impl::note_checkpoints(WorkerId w, uint64_t g, int64_t s, std::optional<int64_t> failed,
                                         const std::string& error) {
  if (!failed || !ckpt_health.observe(w, *failed, error)) return;
  log.write({{"ts_us", rf::wall_us()}, {"event", "checkpoint_failed"}, {"cause", "storage"}, {"worker", worker_json(w)},
             {"g", g}, {"s", s}, {"detail", rf::str(ckpt_health.total(), " in the job")}, {"error", error}});
}

void Coordinator::Impl::handle(Conn& c, const Request& req, TimePoint now) {
  if (const auto* h = std::get_if<Hello>(&req)) return challenge(c, *h);
  if (const auto* a = std::get_if<Auth>(&req)) return handle_auth(c, *a, now);
  check_allowed(c, req);
  std::visit(
      [&](const auto& r) {
        using T = std::decay_t<decltype(r)>;
        if constexpr (!std::is_same_v<T, Hello> && !std::is_same_v<T, Auth>) on(c, r, now);
      },
      req);
}

// Who may send what: a launcher sends its own requests and the store's, a worker never a
// launcher's; heartbeats come on the member connection; a replica only watches.
void Coordinator::Impl::check_allowed(const Conn& c, const Request& req) const {
  if (!c.hello) throw ProtocolError(rf::str("request '", request_name(req), "' before hello"));
  if (c.role == Role::Replica) throw ProtocolError("a replica's connection only watches the leader");
  const bool launcher = c.role == Role::Launcher;
  const bool launcher_only = std::holds_alternative<Status>(req) || std::holds_alternative<Exited>(req) ||
                             std::holds_alternative<StopJob>(req) || std::holds_alternative<Summary>(req);
  const bool kv_req = std::holds_alternative<KvSet>(req) || std::holds_alternative<KvGet>(req) ||
                      std::holds_alternative<KvWait>(req) || std::holds_alternative<KvCas>(req);
  if (launcher && !launcher_only && !kv_req)
    throw ProtocolError(rf::str("request '", request_name(req), "' is not allowed for a launcher"));
  if (!launcher && launcher_only)
    throw ProtocolError(rf::str("request '", request_name(req), "' is only allowed for a launcher"));
  if (std::holds_alternative<Heartbeat>(req) && c.role != Role::Member)
    throw ProtocolError("heartbeats go on the member connection");
}

void Coordinator::Impl::on(Conn& c, const Heartbeat& r, TimePoint now) {
  HeartbeatResult h = membership.heartbeat(c.worker, r.generation, r.step, now, r.activity);
  if (!h.fenced) progress[c.worker.slot] = {c.worker.incarnation, r.step, r.loss, r.samples_per_s};
  if (!h.fenced) note_checkpoints(c.worker, r.generation, r.step, r.ckpt_failed, r.ckpt_error);
  send(c, encode_reply(HeartbeatReply{h.fenced, h.generation, h.phase, h.reconfigure, h.stop, h.planned, h.cause}));
}

void Coordinator::Impl::on(Conn& c, const Report& r, TimePoint now) {
  const StateReport state{r.has_state, r.step, r.digest, r.comm_generation};
  send(c, encode_answer("report_reply", membership.report(c.worker, r.round, state, now)));
}

// plan, ready and kv_wait are parked until their reply is due (try_pending).
void Coordinator::Impl::on(Conn& c, const PlanRequest& r, TimePoint now) {
  c.pending = Pending{r, now + std::chrono::milliseconds(r.timeout_ms)};
}

void Coordinator::Impl::on(Conn& c, const Ready& r, TimePoint now) {
  Answer a = membership.ready(c.worker, r.generation, now);
  if (!a.ok()) {
    send(c, encode_ready_refusal(a));
    return;
  }
  c.pending = Pending{r, now + std::chrono::milliseconds(r.timeout_ms)};
}

void Coordinator::Impl::on(Conn& c, const KvWait& r, TimePoint now) {
  c.pending = Pending{r, now + std::chrono::milliseconds(r.timeout_ms)};
}

void Coordinator::Impl::on(Conn& c, const KvSet& r, TimePoint) {
  try {
    kv.set(r.generation, r.key, r.value);
  } catch (const rf::InvalidInput& e) {
    throw ProtocolError(e.what());
  }
  if (opt.leadership) uncommitted.push_back(EtcdOp::put(kv_entry_key(r.generation, r.key), r.value));
  kv_written.emplace_back(r.generation, r.key);
  send(c, {{"type", "kv_set_reply"}});
}

void Coordinator::Impl::on(Conn& c, const KvGet& r, TimePoint) {
  send(c, encode_kv_value("kv_get_reply", KvValueReply{kv.get(r.generation, r.key)}));
}

void Coordinator::Impl::on(Conn& c, const KvCas& r, TimePoint) {
  std::pair<bool, std::optional<std::string>> res;
  try {
    res = kv.compare_and_set(r.generation, r.key, r.expected, r.desired);
  } catch (const rf::InvalidInput& e) {
    throw ProtocolError(e.what());
  }
  if (res.first) kv_written.emplace_back(r.generation, r.key);
  send(c, encode_reply(KvCasReply{res.first, res.second}));
}

void Coordinator::Impl::on(Conn& c, const FailureReport& r, TimePoint now) {
  Answer a = membership.failure_report(c.worker, r.generation, r.step, r.peer_slot, r.cause, now, r.kind);
  send(c, encode_answer("failure_reply", a));
}

void Coordinator::Impl::on(Conn& c, const PhaseTiming& r, TimePoint) {
  membership.phase_timing(c.worker, r.generation, r.phase, r.ms);
  send(c, {{"type", "phase_reply"}});
}

void Coordinator::Impl::on(Conn& c, const Leave& r, TimePoint now) {
  note_checkpoints(c.worker, membership.generation(), r.step.value_or(-1), r.ckpt_failed, r.ckpt_error);
  send(c, encode_answer("leave_reply", membership.leave(c.worker, now, r.step)));
}

void Coordinator::Impl::on(Conn& c, const Status&, TimePoint) {
  json st = status_reply(membership, opt.membership.target_world, progress, evictions,
                         opt.leadership ? opt.leadership->id() : std::string(), leaders);
  st["checkpoints_failed"] = ckpt_health.total();
  st["checkpoint_error"] = ckpt_health.last_error();
  send(c, st);
}

void Coordinator::Impl::on(Conn& c, const Exited& r, TimePoint now) {
  const TimePoint exited_at = now - std::chrono::microseconds(std::max<int64_t>(0, rf::wall_us() - r.exited_wall_us));
  const Membership::ExitedInfo info = membership.process_exited({r.slot, r.incarnation}, r.status, exited_at, now);
  send(c, encode_reply(ExitedReply{info.registered, info.left, membership.phase()}));
}

void Coordinator::Impl::on(Conn& c, const StopJob&, TimePoint now) {
  membership.request_stop(now);
  send(c, {{"type", "stop_reply"}});
}

void Coordinator::Impl::on(Conn& c, const Summary&, TimePoint) {
  send(c, summary_reply(membership, [this](TimePoint t) { return wall(t); }, leaders));
}

void Coordinator::Impl::on(Conn& c, const Fatal& r, TimePoint now) {
  send(c, encode_answer("fatal_reply", membership.worker_fatal(c.worker, r.error, now)));
}

void Coordinator::Impl::on(Conn& c, const Injected& r, TimePoint now) {
  membership.worker_injected(c.worker, r.generation, r.step, r.spec, now);
  send(c, {{"type", "injected_reply"}});
}

// Admission (elastic/auth.h): prove we hold the token over the client's nonce, and ask
// it to prove the same over ours. Nothing about the job is said before it has.
void Coordinator::Impl::challenge(Conn& c, const Hello& h) {
  if (c.hello || c.challenged) throw ProtocolError("hello sent twice");
  c.challenged = h;
  c.server_nonce = random_token();
  send(c, {{"type", "challenge"}, {"nonce", c.server_nonce},
           {"proof", coordinator_proof(opt.token, h.nonce, c.server_nonce)}});
}

void Coordinator::Impl::handle_auth(Conn& c, const Auth& a, TimePoint now) {
  if (c.hello || !c.challenged) throw ProtocolError("auth without a challenge (send hello first)");
  const Hello h = *c.challenged;
  c.challenged.reset();
  const std::string want =
      client_proof(opt.token, c.server_nonce, h.nonce, to_string(h.role), h.slot, h.incarnation);
  if (!token_equal(a.mac, want)) {
    log.write({{"ts_us", rf::wall_us()}, {"event", "refused"}, {"cause", "wrong_token"}, {"peer", c.peer}});
    send_error(c, "wrong job token");
    return;
  }
  handle_hello(c, h, now);
}

void Coordinator::Impl::handle_hello(Conn& c, const Hello& h, TimePoint now) {
  c.role = h.role;
  c.worker = {h.slot, h.incarnation};
  if (h.role == Role::Member) {
    JoinResult j = membership.join(c.worker, now);
    if (!j.ok()) {
      // "finished" lets the client tell a job that ended normally from a refusal.
      send_error(c, rf::str("join refused: ", j.reason), j.kind == Answer::Finished ? "finished" : "refused");
      return;
    }
    send(c, encode_reply(WelcomeReply{
                j.generation, j.phase, opt.membership.target_world,
                std::chrono::duration_cast<std::chrono::milliseconds>(opt.membership.heartbeat).count(),
                std::chrono::duration_cast<std::chrono::milliseconds>(opt.membership.lease).count()}));
  } else {
    if (h.role == Role::Launcher) ++owner->launchers_;
    send(c, encode_reply(WelcomeReply{membership.generation(), membership.phase(), opt.membership.target_world,
                                      std::nullopt, std::nullopt}));
  }
  c.hello = true;
}

// A parked request: sends its reply when it is due (true), or leaves it parked (false).
bool Coordinator::Impl::try_pending(Conn& c, TimePoint now) {
  const Pending& p = *c.pending;
  const bool expired = now >= p.deadline;
  if (const auto* r = std::get_if<PlanRequest>(&p.req)) {
    PlanQuery q = membership.plan_for(c.worker, r->round, /*with_plan=*/false);
    if (q.kind == PlanQuery::Pending && !expired) return false;
    if (q.kind != PlanQuery::Ready) return send(c, encode_reply(q)), true;
    // Every worker of a round gets the same plan (a generation's plan never changes): it is
    // encoded once, not once per worker (W of them, each W ranks long).
    if (plan_frame.first != q.plan.generation)
      plan_frame = {q.plan.generation, encode_frame(encode_reply(membership.plan_for(c.worker, r->round)))};
    send_frame(c, plan_frame.second);
    return true;
  }
  if (const auto* r = std::get_if<Ready>(&p.req)) {
    ReadyQuery q = membership.ready_state(c.worker, r->generation);
    if (q.kind == ReadyQuery::Pending && !expired) return false;
    send(c, encode_reply(q));
    return true;
  }
  const auto& w = std::get<KvWait>(p.req);
  KvValueReply v{kv.get(w.generation, w.key)};
  if (!v.value_hex && !expired) return false;
  send(c, encode_kv_value("kv_wait_reply", v));
  return true;
}

}  // namespace rf::elastic
