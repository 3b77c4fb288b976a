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

#include "base/str.h"
#include "base/thread_sched.h"
#include "elastic/coordinator_impl.h"
#include "elastic/token.h"

namespace rf::elastic {

using nlohmann::json;

namespace {

constexpr size_t kMaxOutBytes = 8u << 20;  // a client that stops reading is cut off

void set_nonblocking(int fd) {
  int fl = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

}  // namespace

std::optional<ControlState> Coordinator::Impl::load_state(Leadership* lead) {
  if (!lead) return std::nullopt;
  for (const auto& kv : lead->load("state"))
    if (kv.key == "state") return decode_control_state(kv.value);
  return std::nullopt;
}

std::vector<std::tuple<uint64_t, std::string, std::string>> Coordinator::Impl::load_kv(Leadership* lead) {
  std::vector<std::tuple<uint64_t, std::string, std::string>> out;
  if (!lead) return out;
  for (const auto& kv : lead->load(kKvPrefix))
    if (auto gk = parse_kv_entry_key(kv.key)) out.emplace_back(gk->first, gk->second, kv.value);
  return out;
}

// A new job draws its id; a coordinator taking over keeps the job's id and continues after
// the newest generation its predecessor committed.
CoordinatorOptions Coordinator::Impl::prepared(CoordinatorOptions o, const std::optional<ControlState>& prev) {
  if (prev) {
    if (!prev->job_id.empty()) o.membership.job_id = prev->job_id;
    o.membership.first_generation = prev->generation + 1;
    if (prev->phase == Phase::Running || prev->phase == Phase::Recovering) o.membership.previous_members = prev->members;
  }
  if (o.membership.job_id.empty()) o.membership.job_id = random_token();
  return o;
}

Coordinator::Impl::Impl(CoordinatorOptions o, Coordinator* self)
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
               {"previous_phase", prev_state && prev_state->phase ? to_string(*prev_state->phase) : ""},
               {"store_entries", prev_kv.size()}});
  }
}

Coordinator::Impl::~Impl() {
  for (auto& c : conns) ::close(c.fd);
  if (listen_fd >= 0) ::close(listen_fd);
  for (int fd : wake)
    if (fd >= 0) ::close(fd);
}

int64_t Coordinator::Impl::wall(TimePoint t) const {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count() + wall_offset_us;
}

void Coordinator::Impl::send(Conn& c, json reply) {
  if (c.dead) return;
  c.out += encode_frame(std::move(reply));
  if (c.out.size() > kMaxOutBytes) c.dead = true;
}

void Coordinator::Impl::send_error(Conn& c, const std::string& what, const char* code) {
  send(c, {{"type", "error"}, {"error", what}, {"code", code}});
  c.closing = true;
}

void Coordinator::Impl::run() {
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

void Coordinator::Impl::accept_all() {
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

void Coordinator::Impl::read_from(Conn& c) {
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

void Coordinator::Impl::report_lost(Conn& c, TimePoint now) {
  if (c.lost_reported || !c.hello || c.role != Role::Member) return;
  c.lost_reported = true;
  membership.connection_lost(c.worker, now);
}

void Coordinator::Impl::write_to(Conn& c) {
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

void Coordinator::Impl::process_frames(Conn& c) {
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

void Coordinator::Impl::after_events(TimePoint now) {
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
    json line = {{"ts_us", wall(t.at)}, {"event", to_string(t.event)}, {"cause", t.cause}, {"worker", worker_json(t.worker)},
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
