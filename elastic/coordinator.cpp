#include "elastic/coordinator.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <list>
#include <map>
#include <optional>
#include <tuple>

#include "base/clock.h"
#include "base/str.h"
#include "base/thread_sched.h"
#include "elastic/event_log.h"
#include "elastic/frame.h"
#include "elastic/kv_store.h"
#include "elastic/membership.h"
#include "elastic/messages.h"
#include "elastic/auth.h"
#include "elastic/checkpoint_health.h"
#include "elastic/control_state.h"
#include "elastic/coordinator_replies.h"
#include "elastic/leadership.h"
#include "elastic/token.h"

namespace rf::elastic {

using nlohmann::json;

namespace {

constexpr size_t kMaxOutBytes = 8u << 20;  // a client that stops reading is cut off

void set_nonblocking(int fd) {
  int fl = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

const char* answer_name(Answer::Kind k) {
  switch (k) {
    case Answer::Accepted: return "accepted";
    case Answer::Stale: return "stale";
    case Answer::Fenced: return "fenced";
    case Answer::Refused: return "refused";
    case Answer::Stopped: return "stopped";
    case Answer::Finished: return "finished";
  }
  return "?";
}

}  // namespace

struct Coordinator::Impl {
  struct Pending {
    Request req;
    TimePoint deadline;
  };
  struct Conn {
    int fd = -1;
    std::string peer;
    FrameReader reader;
    std::string out;
    bool hello = false;                // admitted: the challenge was answered
    std::optional<Hello> challenged;   // hello received, challenge sent, auth awaited
    std::string server_nonce;
    Role role = Role::Caller;
    WorkerId worker;
    bool closing = false;  // flush `out`, then close
    bool dead = false;
    bool lost_reported = false;
    TimePoint accepted_at;  // connection_lost() called exactly once per member connection
    std::optional<Pending> pending;
  };

  // With a Leadership: what the previous leader committed (loaded before anything else).
  std::optional<ControlState> prev_state;
  std::vector<std::tuple<uint64_t, std::string, std::string>> prev_kv;
  CoordinatorOptions opt;
  int listen_fd = -1;
  int wake[2] = {-1, -1};
  int bound_port = 0;
  std::atomic<bool> stopping{false};
  Membership membership;
  KvStore kv;
  EventLog log;
  std::list<Conn> conns;
  std::map<int, Progress> progress;  // the live line's figures, by slot (coordinator_replies.h)
  CheckpointHealth ckpt_health;      // disk checkpoints the writers could not write (heartbeats, leaves)
  int64_t wall_offset_us;
  uint64_t last_generation = 0;
  std::vector<json> evictions;  // history, for launchers
  Coordinator* owner;

  // The committed state (with a Leadership): leaders, what was last committed, the store
  // writes not committed yet, why leadership was lost.
  std::vector<LeaderTerm> leaders;
  std::string committed;
  std::optional<std::tuple<uint64_t, int, bool>> committed_key;  // (generation, phase, round planned)
  uint64_t committed_generation = 0;  // what the last commit held, for the event log
  std::string committed_phase;
  std::vector<EtcdOp> uncommitted;
  std::string lost_reason;

  static std::optional<ControlState> load_state(Leadership* lead) {
    if (!lead) return std::nullopt;
    for (const auto& kv : lead->load("state"))
      if (kv.key == "state") return decode_control_state(kv.value);
    return std::nullopt;
  }
  static std::vector<std::tuple<uint64_t, std::string, std::string>> load_kv(Leadership* lead) {
    std::vector<std::tuple<uint64_t, std::string, std::string>> out;
    if (!lead) return out;
    for (const auto& kv : lead->load(kKvPrefix))
      if (auto gk = parse_kv_entry_key(kv.key)) out.emplace_back(gk->first, gk->second, kv.value);
    return out;
  }
  // A new job draws its id; a coordinator taking over keeps the job's id and continues after
  // the newest generation its predecessor committed.
  static CoordinatorOptions prepared(CoordinatorOptions o, const std::optional<ControlState>& prev) {
    if (prev) {
      if (!prev->job_id.empty()) o.membership.job_id = prev->job_id;
      o.membership.first_generation = prev->generation + 1;
      if (prev->phase == "RUNNING" || prev->phase == "RECOVERING") o.membership.previous_members = prev->members;
    }
    if (o.membership.job_id.empty()) o.membership.job_id = random_token();
    return o;
  }

  Impl(CoordinatorOptions o, Coordinator* self)
      : prev_state(load_state(o.leadership.get())),
        prev_kv(load_kv(o.leadership.get())),
        opt(prepared(std::move(o), prev_state)),
        membership(opt.membership, Clock::now()),
        log(opt.event_log),
        owner(self) {
    wall_offset_us = rf::wall_us() - std::chrono::duration_cast<std::chrono::microseconds>(
                                         Clock::now().time_since_epoch()).count();
    if (opt.token.empty()) throw rf::InvalidInput("the coordinator needs a job token");
    listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listen_fd < 0) throw rf::Error(rf::str("socket: ", std::strerror(errno)));
    int one = 1;
    setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(opt.port));
    if (inet_pton(AF_INET, opt.host.c_str(), &addr.sin_addr) != 1)
      throw rf::InvalidInput(rf::str("coordinator host '", opt.host, "' is not an IPv4 address"));
    if (::bind(listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(listen_fd, 512) != 0) {
      std::string e = std::strerror(errno);
      ::close(listen_fd);
      throw rf::Error(rf::str("cannot listen on ", opt.host, ":", opt.port, ": ", e));
    }
    socklen_t len = sizeof addr;
    getsockname(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len);
    bound_port = ntohs(addr.sin_port);
    set_nonblocking(listen_fd);
    if (::pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) throw rf::Error("pipe2 failed");
    last_generation = membership.generation();
    log.write({{"ts_us", rf::wall_us()}, {"event", "listening"}, {"host", opt.host}, {"port", bound_port},
               {"target_world", opt.membership.target_world}, {"min_world", opt.membership.min_world},
               {"job_id", opt.membership.job_id}});
    if (opt.leadership) {
      for (const auto& [g, key, value] : prev_kv) kv.set(g, key, value);
      if (prev_state) leaders = prev_state->leaders;
      leaders.push_back({opt.leadership->id(), membership.generation(), rf::wall_us()});
      log.write({{"ts_us", rf::wall_us()}, {"event", "leading"}, {"leader", opt.leadership->id()},
                 {"g", membership.generation()}, {"failovers", leaders.size() - 1},
                 {"previous_phase", prev_state ? prev_state->phase : ""}, {"store_entries", prev_kv.size()}});
    }
  }

  ~Impl() {
    for (auto& c : conns) ::close(c.fd);
    if (listen_fd >= 0) ::close(listen_fd);
    for (int fd : wake)
      if (fd >= 0) ::close(fd);
  }

  int64_t wall(TimePoint t) const {
    return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count() + wall_offset_us;
  }

  void send(Conn& c, json reply) {
    if (c.dead) return;
    c.out += encode_frame(std::move(reply));
    if (c.out.size() > kMaxOutBytes) c.dead = true;
  }
  void send_error(Conn& c, const std::string& what, const char* code = "refused") {
    send(c, {{"type", "error"}, {"error", what}, {"code", code}});
    c.closing = true;
  }

  // --- the loop ------------------------------------------------------------------------
  void run() {
    // Leases and stuck-member judgements are measured on this loop: on an overloaded
    // machine it must still run when it is due (base/thread_sched.h).
    const ThreadPriority prio = raise_to_control_plane();
    log.write({{"ts_us", rf::wall_us()}, {"event", "scheduling"}, {"thread", "coordinator"},
               {"priority", to_string(prio)}});
    std::vector<pollfd> fds;
    commit_if_changed();  // a new leader's term and first generation, before anyone hears of it
    while (!stopping.load()) {
      if (opt.leadership && !opt.leadership->leading(Clock::now())) {
        lose(opt.leadership->lost_reason());
        break;
      }
      fds.clear();
      fds.push_back({wake[0], POLLIN, 0});
      fds.push_back({listen_fd, POLLIN, 0});
      for (auto& c : conns)
        fds.push_back({c.fd, static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
      const int timeout_ms = std::max(1, static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(opt.tick).count()));
      int n = ::poll(fds.data(), fds.size(), timeout_ms);
      if (n < 0 && errno != EINTR) throw rf::Error(rf::str("poll: ", std::strerror(errno)));
      if (fds[0].revents & POLLIN) {
        char buf[64];
        while (::read(wake[0], buf, sizeof buf) > 0) {
        }
      }
      if (fds[1].revents & POLLIN) accept_all();
      size_t i = 2;
      for (auto& c : conns) {
        if (i >= fds.size()) break;  // accepted in this iteration: polled next time
        const short re = fds[i++].revents;
        if (re & (POLLIN | POLLHUP | POLLERR)) read_from(c);
        if (!c.dead && !c.out.empty()) write_to(c);
      }
      const TimePoint now = Clock::now();
      membership.tick(now);
      after_events(now);
    }
  }

  void accept_all() {
    while (true) {
      sockaddr_in addr{};
      socklen_t len = sizeof addr;
      int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;
      if (conns.size() >= opt.max_connections) {
        ::close(fd);
        continue;
      }
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      Conn c;
      c.fd = fd;
      c.accepted_at = Clock::now();
      char ip[INET_ADDRSTRLEN] = "?";
      inet_ntop(AF_INET, &addr.sin_addr, ip, sizeof ip);
      c.peer = rf::str(ip, ":", ntohs(addr.sin_port));
      conns.push_back(std::move(c));
    }
  }

  void read_from(Conn& c) {
    char buf[65536];
    while (!c.dead) {
      ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
      if (n > 0) {
        c.reader.feed(buf, static_cast<size_t>(n));
        process_frames(c);
        if (c.closing) return;  // ignore whatever else it sent
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n < 0 && errno == EINTR) continue;
      c.dead = true;  // EOF or error
      // D1 at once, before any later frame of this loop turn (e.g. the same worker
      // re-joining on a new connection after self-fencing) is handled.
      report_lost(c, Clock::now());
    }
  }

  void report_lost(Conn& c, TimePoint now) {
    if (c.lost_reported || !c.hello || c.role != Role::Member) return;
    c.lost_reported = true;
    membership.connection_lost(c.worker, now);
  }

  void write_to(Conn& c) {
    if (!commit_if_changed()) return;  // nothing leaves that etcd does not hold
    while (!c.out.empty()) {
      ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
      if (n > 0) {
        c.out.erase(0, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n < 0 && errno == EINTR) continue;
      c.dead = true;
      return;
    }
  }

  void process_frames(Conn& c) {
    const TimePoint now = Clock::now();
    try {
      while (auto payload = c.reader.next()) {
        json m = parse_message(*payload);
        Request req = decode_request(m);
        if (c.pending) throw ProtocolError(rf::str("request '", request_name(req), "' sent while another is pending"));
        handle(c, req, now);
        if (c.closing) return;
      }
    } catch (const ProtocolError& e) {
      log.write({{"ts_us", rf::wall_us()}, {"event", "protocol_error"}, {"peer", c.peer}, {"error", e.what()}});
      send_error(c, e.what());
    } catch (const std::exception& e) {
      // Not expected (every input is validated above); still, one connection's request
      // must never take the coordinator down: answer, close it, keep serving.
      log.write({{"ts_us", rf::wall_us()}, {"event", "internal_error"}, {"peer", c.peer}, {"error", e.what()}});
      send_error(c, rf::str("internal error: ", e.what()));
    }
    // after_events() runs once per loop iteration, not here: it may erase connections
    // while the loop is iterating over them.
  }

  // A writer's count of failed disk checkpoints (a heartbeat's or a leave's): logged when it grew.
  void note_checkpoints(WorkerId w, uint64_t g, int64_t s, std::optional<int64_t> failed, const std::string& error) {
    if (!failed || !ckpt_health.observe(w, *failed, error)) return;
    log.write({{"ts_us", rf::wall_us()}, {"event", "checkpoint_failed"}, {"cause", "storage"}, {"worker", worker_json(w)},
               {"g", g}, {"s", s}, {"detail", rf::str(ckpt_health.total(), " in the job")}, {"error", error}});
  }

  // --- requests ------------------------------------------------------------------------
  void handle(Conn& c, const Request& req, TimePoint now) {
    if (const auto* h = std::get_if<Hello>(&req)) return challenge(c, *h);
    if (const auto* a = std::get_if<Auth>(&req)) return handle_auth(c, *a, now);
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

    std::visit(
        [&](const auto& r) {
          using T = std::decay_t<decltype(r)>;
          if constexpr (std::is_same_v<T, Heartbeat>) {
            HeartbeatResult h = membership.heartbeat(c.worker, r.generation, r.step, now, r.activity);
            if (!h.fenced) progress[c.worker.slot] = {c.worker.incarnation, r.step, r.loss, r.samples_per_s};
            if (!h.fenced) note_checkpoints(c.worker, r.generation, r.step, r.ckpt_failed, r.ckpt_error);
            send(c, {{"type", "heartbeat_reply"}, {"fenced", h.fenced}, {"generation", h.generation},
                     {"phase", to_string(h.phase)}, {"reconfigure", h.reconfigure}, {"stop", h.stop},
                     {"planned", h.planned}, {"cause", h.cause ? to_string(*h.cause) : ""}});
          } else if constexpr (std::is_same_v<T, Report>) {
            const StateReport state{r.has_state, r.step, r.digest, r.comm_generation};
            Answer a = membership.report(c.worker, r.round, state, now);
            send(c, answer_json("report_reply", a));
          } else if constexpr (std::is_same_v<T, PlanRequest> || std::is_same_v<T, Ready> ||
                               std::is_same_v<T, KvWait>) {
            if constexpr (std::is_same_v<T, Ready>) {
              Answer a = membership.ready(c.worker, r.generation, now);
              if (!a.ok()) {
                send(c, {{"type", "ready_reply"}, {"status", answer_name(a.kind)}, {"generation", a.generation},
                         {"reason", a.reason}});
                return;
              }
            }
            c.pending = Pending{req, now + std::chrono::milliseconds(r.timeout_ms)};
          } else if constexpr (std::is_same_v<T, KvSet>) {
            try {
              kv.set(r.generation, r.key, r.value);
            } catch (const rf::InvalidInput& e) {
              throw ProtocolError(e.what());
            }
            if (opt.leadership) uncommitted.push_back(EtcdOp::put(kv_entry_key(r.generation, r.key), r.value));
            send(c, {{"type", "kv_set_reply"}});
          } else if constexpr (std::is_same_v<T, KvGet>) {
            auto v = kv.get(r.generation, r.key);
            send(c, {{"type", "kv_get_reply"}, {"found", v.has_value()}, {"value", v ? json(*v) : json(nullptr)}});
          } else if constexpr (std::is_same_v<T, KvCas>) {
            std::pair<bool, std::optional<std::string>> res;
            try {
              res = kv.compare_and_set(r.generation, r.key, r.expected, r.desired);
            } catch (const rf::InvalidInput& e) {
              throw ProtocolError(e.what());
            }
            send(c, {{"type", "kv_cas_reply"}, {"swapped", res.first},
                     {"value", res.second ? json(*res.second) : json(nullptr)}});
          } else if constexpr (std::is_same_v<T, FailureReport>) {
            Answer a = membership.failure_report(c.worker, r.generation, r.step, r.peer_slot, r.cause, now, r.kind);
            send(c, answer_json("failure_reply", a));
          } else if constexpr (std::is_same_v<T, PhaseTiming>) {
            membership.phase_timing(c.worker, r.generation, r.phase, r.ms);
            send(c, {{"type", "phase_reply"}});
          } else if constexpr (std::is_same_v<T, Leave>) {
            note_checkpoints(c.worker, membership.generation(), r.step.value_or(-1), r.ckpt_failed, r.ckpt_error);
            Answer a = membership.leave(c.worker, now, r.step);
            send(c, answer_json("leave_reply", a));
          } else if constexpr (std::is_same_v<T, Status>) {
            json st = status_reply(membership, opt.membership.target_world, progress, evictions,
                                   opt.leadership ? opt.leadership->id() : std::string(), leaders);
            st["checkpoints_failed"] = ckpt_health.total();
            st["checkpoint_error"] = ckpt_health.last_error();
            send(c, st);
          } else if constexpr (std::is_same_v<T, Exited>) {
            const TimePoint exited_at = now - std::chrono::microseconds(std::max<int64_t>(0, rf::wall_us() - r.exited_wall_us));
            const Membership::ExitedInfo info = membership.process_exited({r.slot, r.incarnation}, r.status, exited_at, now);
            send(c, {{"type", "exited_reply"}, {"registered", info.registered}, {"left", info.left},
                     {"phase", to_string(membership.phase())}});
          } else if constexpr (std::is_same_v<T, StopJob>) {
            membership.request_stop(now);
            send(c, {{"type", "stop_reply"}});
          } else if constexpr (std::is_same_v<T, Summary>) {
            send(c, summary_reply(membership, [this](TimePoint t) { return wall(t); }, leaders));
          } else if constexpr (std::is_same_v<T, Fatal>) {
            Answer a = membership.worker_fatal(c.worker, r.error, now);
            send(c, answer_json("fatal_reply", a));
          } else if constexpr (std::is_same_v<T, Injected>) {
            membership.worker_injected(c.worker, r.generation, r.step, r.spec, now);
            send(c, {{"type", "injected_reply"}});
          }
        },
        req);
  }

  static json answer_json(const char* type, const Answer& a) {
    return {{"type", type}, {"result", answer_name(a.kind)}, {"generation", a.generation}, {"reason", a.reason}};
  }

  // Admission (elastic/auth.h): prove we hold the token over the client's nonce, and ask
  // it to prove the same over ours. Nothing about the job is said before it has.
  void challenge(Conn& c, const Hello& h) {
    if (c.hello || c.challenged) throw ProtocolError("hello sent twice");
    c.challenged = h;
    c.server_nonce = random_token();
    send(c, {{"type", "challenge"}, {"nonce", c.server_nonce}, {"proof", coordinator_proof(opt.token, h.nonce, c.server_nonce)}});
  }

  void handle_auth(Conn& c, const Auth& a, TimePoint now) {
    if (c.hello || !c.challenged) throw ProtocolError("auth without a challenge (send hello first)");
    const Hello h = *c.challenged;
    c.challenged.reset();
    static const char* roles[] = {"member", "caller", "launcher", "replica"};
    const std::string want =
        client_proof(opt.token, c.server_nonce, h.nonce, roles[static_cast<int>(h.role)], h.slot, h.incarnation);
    if (!token_equal(a.mac, want)) {
      log.write({{"ts_us", rf::wall_us()}, {"event", "refused"}, {"cause", "wrong_token"}, {"peer", c.peer}});
      send_error(c, "wrong job token");
      return;
    }
    handle_hello(c, h, now);
  }

  void handle_hello(Conn& c, const Hello& h, TimePoint now) {
    c.role = h.role;
    c.worker = {h.slot, h.incarnation};
    if (h.role == Role::Member) {
      JoinResult j = membership.join(c.worker, now);
      if (!j.ok()) {
        // "finished" lets the client tell a job that ended normally from a refusal.
        send_error(c, rf::str("join refused: ", j.reason), j.kind == Answer::Finished ? "finished" : "refused");
        return;
      }
      send(c, {{"type", "welcome"}, {"generation", j.generation}, {"phase", to_string(j.phase)},
               {"target_world", opt.membership.target_world},
               {"heartbeat_ms", std::chrono::duration_cast<std::chrono::milliseconds>(opt.membership.heartbeat).count()},
               {"lease_ms", std::chrono::duration_cast<std::chrono::milliseconds>(opt.membership.lease).count()}});
    } else {
      if (h.role == Role::Launcher) ++owner->launchers_;
      send(c, {{"type", "welcome"}, {"generation", membership.generation()}, {"phase", to_string(membership.phase())},
               {"target_world", opt.membership.target_world}});
    }
    c.hello = true;
  }

  // A parked request: its reply, or nullopt while it must keep waiting.
  std::optional<json> try_pending(Conn& c, TimePoint now) {
    const Pending& p = *c.pending;
    const bool expired = now >= p.deadline;
    if (const auto* r = std::get_if<PlanRequest>(&p.req)) {
      PlanQuery q = membership.plan_for(c.worker, r->round);
      static const char* names[] = {"pending", "plan", "revoked", "fenced", "stopped", "done"};
      if (q.kind == PlanQuery::Pending && !expired) return std::nullopt;
      json j = {{"type", "plan_reply"}, {"status", q.kind == PlanQuery::Pending ? "timeout" : names[q.kind]},
                {"generation", q.generation}, {"error", q.error}};
      if (q.kind == PlanQuery::Ready) j["plan"] = plan_json(q.plan);
      return j;
    }
    if (const auto* r = std::get_if<Ready>(&p.req)) {
      ReadyQuery q = membership.ready_state(c.worker, r->generation);
      static const char* names[] = {"pending", "running", "revoked", "fenced", "stopped", "done"};
      if (q.kind == ReadyQuery::Pending && !expired) return std::nullopt;
      return json{{"type", "ready_reply"}, {"status", q.kind == ReadyQuery::Pending ? "timeout" : names[q.kind]},
                  {"generation", q.generation}, {"reason", q.error}};
    }
    const auto& w = std::get<KvWait>(p.req);
    auto v = kv.get(w.generation, w.key);
    if (!v && !expired) return std::nullopt;
    return json{{"type", "kv_wait_reply"}, {"found", v.has_value()}, {"value", v ? json(*v) : json(nullptr)}};
  }

  void after_events(TimePoint now) {
    for (auto& c : conns)
      if (c.pending && !c.dead)
        if (auto reply = try_pending(c, now)) {
          c.pending.reset();
          send(c, std::move(*reply));
        }
    for (auto& c : conns)
      if (!c.hello && !c.closing && now - c.accepted_at > opt.hello_timeout)
        send_error(c, "no hello before the deadline");
    // Close what is finished; a member connection closing is D1.
    for (auto it = conns.begin(); it != conns.end();) {
      Conn& c = *it;
      if (c.closing && !c.dead && !c.out.empty()) write_to(c);
      if (c.dead || (c.closing && c.out.empty())) {
        // Gone between our challenge and its answer: a client whose token did not match our
        // proof (it refuses us first: elastic/auth.h), or a stranger that gave up.
        if (c.challenged)
          log.write({{"ts_us", rf::wall_us()}, {"event", "refused"}, {"cause", "challenge_unanswered"}, {"peer", c.peer}});
        report_lost(c, now);
        if (c.hello && c.role == Role::Launcher) --owner->launchers_;
        ::close(c.fd);
        it = conns.erase(it);
      } else {
        ++it;
      }
    }
    for (const auto& t : membership.take_transitions()) {
      json line = {{"ts_us", wall(t.at)}, {"event", t.event}, {"cause", t.cause}, {"worker", worker_json(t.worker)},
                   {"g", t.generation}, {"s", t.step}};
      if (t.first_seen) {
        line["since_failure_ms"] = std::chrono::duration<double, std::milli>(t.at - *t.first_seen).count();
        line["first_seen_us"] = wall(*t.first_seen);
      }
      if (!t.detail.empty()) line["detail"] = t.detail;
      log.write(line);
    }
    for (const auto& w : membership.take_evictions())
      evictions.push_back({{"slot", w.slot}, {"incarnation", w.incarnation}});
    if (membership.generation() != last_generation) {
      last_generation = membership.generation();
      if (last_generation >= 2) {
        kv.drop_generations_below(last_generation - 1);
        if (opt.leadership) uncommitted.push_back(EtcdOp::erase(kv_scope_begin(1), kv_scope_begin(last_generation - 1)));
      }
    }
    owner->phase_.store(static_cast<int>(membership.phase()));
  }

  // --- the committed state (with a Leadership) ----------------------------------------
  ControlState control_state() const {
    ControlState st;
    st.generation = membership.generation();
    st.phase = to_string(membership.phase());
    st.job_id = opt.membership.job_id;
    st.members = membership.members();
    if (membership.plan()) st.plan = plan_json(*membership.plan());
    else if (membership.running_plan()) st.plan = plan_json(*membership.running_plan());
    st.error = membership.error();
    st.leaders = leaders;
    return st;
  }

  // Commits what changed since the last commit: false when leadership is lost (the caller
  // must not send anything; the loop stops).
  bool commit_if_changed() {
    if (!opt.leadership) return true;
    if (owner->lost_.load()) return false;
    // The state changes only with the generation, the phase (members, the running plan and
    // the error change with it) or a round's plan: this runs before every socket write, so
    // the state is encoded only when one of them moved.
    const auto key = std::make_tuple(membership.generation(), static_cast<int>(membership.phase()),
                                     membership.plan().has_value());
    if (key == committed_key && uncommitted.empty()) return true;
    std::string st = encode_control_state(control_state());
    if (st == committed && uncommitted.empty()) return true;
    std::vector<EtcdOp> ops = std::move(uncommitted);
    uncommitted.clear();
    if (st != committed) ops.push_back(EtcdOp::put("state", st));
    try {
      opt.leadership->commit(std::move(ops));
    } catch (const NotLeader& e) {
      lose(e.what());
      return false;
    }
    committed = std::move(st);
    committed_key = key;
    const std::string phase = to_string(membership.phase());
    if (membership.generation() != committed_generation || phase != committed_phase) {
      committed_generation = membership.generation();
      committed_phase = phase;
      log.write({{"ts_us", rf::wall_us()}, {"event", "commit"}, {"g", committed_generation}, {"phase", phase}});
    }
    return true;
  }

  // Stops serving at once: no reply that etcd may not hold leaves, every connection closes
  // (workers self-fence and follow the next leader).
  void lose(const std::string& why) {
    if (owner->lost_.load()) return;
    lost_reason = why;  // before the flag: lost_reason() reads it once the flag is set
    owner->lost_.store(true);
    log.write({{"ts_us", rf::wall_us()}, {"event", "lost_leadership"}, {"leader", opt.leadership->id()},
               {"g", membership.generation()}, {"error", why}});
    for (auto& c : conns) {
      c.out.clear();
      c.dead = true;
    }
    stopping.store(true);
  }

};

Coordinator::Coordinator(CoordinatorOptions options) : impl_(std::make_unique<Impl>(std::move(options), this)) {}

Coordinator::~Coordinator() {
  stop();
  if (thread_.joinable()) thread_.join();
}

int Coordinator::port() const { return impl_->bound_port; }

std::string Coordinator::lost_reason() const { return lost_.load() ? impl_->lost_reason : std::string(); }

void Coordinator::start() {
  thread_ = std::thread([this] { impl_->run(); });
}

void Coordinator::run() { impl_->run(); }

void Coordinator::stop() {
  impl_->stopping.store(true);
  char b = 1;
  [[maybe_unused]] ssize_t n = ::write(impl_->wake[1], &b, 1);
}

}  // namespace rf::elastic
