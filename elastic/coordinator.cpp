#include "elastic/coordinator.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
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

// What an epoll event names when it is not a connection.
char kWakeTag, kListenTag;

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
  if (o.max_connections == 0) {
    o.max_connections = std::max<size_t>(4096, 4 * static_cast<size_t>(std::max(0, o.membership.target_world)));
    rlimit lim{};
    if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
      lim.rlim_cur = lim.rlim_max;
      ::setrlimit(RLIMIT_NOFILE, &lim);
    }
  }
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
  epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd < 0) throw rf::Error(rf::str("epoll_create1: ", std::strerror(errno)));
  for (auto [fd, tag] : {std::pair{wake[0], &kWakeTag}, std::pair{listen_fd, &kListenTag}}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = tag;  // not a connection
    ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev);
  }
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
  if (epoll_fd >= 0) ::close(epoll_fd);
  for (int fd : wake)
    if (fd >= 0) ::close(fd);
}

int64_t Coordinator::Impl::wall(TimePoint t) const {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count() + wall_offset_us;
}

void Coordinator::Impl::touch(Conn& c) {
  if (c.touched) return;
  c.touched = true;
  touched.push_back(&c);
}

void Coordinator::Impl::send(Conn& c, json reply) {
  if (c.dead) return;
  touch(c);
  c.out += encode_frame(std::move(reply));
  if (c.out.size() > kMaxOutBytes) c.dead = true;
}

void Coordinator::Impl::send_frame(Conn& c, const std::string& frame) {
  if (c.dead) return;
  touch(c);
  c.out += frame;
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
  std::vector<epoll_event> events(1024);
  commit_if_changed();  // a new leader's term and first generation, before anyone hears of it
  next_tick = Clock::now();
  while (!stopping.load()) {
    if (opt.leadership && !opt.leadership->leading(Clock::now())) {
      lose(opt.leadership->lost_reason());
      break;
    }
    // Rounded up: a wait rounded down to 0 ms would spin until the tick.
    const auto until_tick = std::chrono::ceil<std::chrono::milliseconds>(next_tick - Clock::now()).count();
    const int n = ::epoll_wait(epoll_fd, events.data(), static_cast<int>(events.size()),
                               static_cast<int>(std::max<int64_t>(0, until_tick)));
    if (n < 0 && errno != EINTR) throw rf::Error(rf::str("epoll_wait: ", std::strerror(errno)));
    for (int i = 0; i < n; ++i) {
      const epoll_event& ev = events[static_cast<size_t>(i)];
      if (ev.data.ptr == &kListenTag) {
        accept_all();
        continue;
      }
      if (ev.data.ptr == &kWakeTag) {
        char buf[64];
        while (::read(wake[0], buf, sizeof buf) > 0) {
        }
        continue;
      }
      Conn* c = static_cast<Conn*>(ev.data.ptr);
      touch(*c);
      if (ev.events & (EPOLLIN | EPOLLHUP | EPOLLERR)) read_from(*c);
    }
    const TimePoint now = Clock::now();
    const bool tick_due = now >= next_tick;
    if (tick_due) {
      membership.tick(now);
      next_tick = now + opt.tick;
    }
    after_events(now, tick_due);
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
    Conn& c = conns.emplace_back();
    c.self = std::prev(conns.end());
    c.fd = fd;
    c.accepted_at = Clock::now();
    char ip[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &addr.sin_addr, ip, sizeof ip);
    c.peer = rf::str(ip, ":", ntohs(addr.sin_port));
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = &c;
    ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev);
    unadmitted.insert(&c);
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
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n < 0 && errno == EINTR) continue;
    c.dead = true;
    return;
  }
  watch_output(c);
}

// EPOLLOUT only while output waits for the socket: a writable socket would wake the loop
// at every turn.
void Coordinator::Impl::watch_output(Conn& c) {
  const bool want = !c.out.empty();
  if (want == c.polls_out) return;
  epoll_event ev{};
  ev.events = EPOLLIN | (want ? EPOLLOUT : 0u);
  ev.data.ptr = &c;
  ::epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c.fd, &ev);
  c.polls_out = want;
}

void Coordinator::Impl::process_frames(Conn& c) {
  const TimePoint now = Clock::now();
  try {
    while (auto payload = c.reader.next()) {
      json m = parse_message(*payload);
      Request req = decode_request(m);
      if (c.pending) throw ProtocolError(rf::str("request '", request_name(req), "' sent while another is pending"));
      handle(c, req, now);
      if (c.hello) unadmitted.erase(&c);
      if (c.pending && !parked.count(&c)) park(c, now);
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
  // after_events() closes connections, not here: the loop may still hold this one.
}

void Coordinator::Impl::after_events(TimePoint now, bool tick_due) {
  // The event log first: a transition other than a member's own report, ready or join (a
  // failure, an eviction, a leave, a plan, a stop) may change a parked request's answer.
  bool moved = false;
  for (const auto& t : membership.take_transitions()) {
    json line = {{"ts_us", wall(t.at)}, {"event", to_string(t.event)}, {"cause", t.cause}, {"worker", worker_json(t.worker)},
                 {"g", t.generation}, {"s", t.step}};
    if (t.first_seen) {
      line["since_failure_ms"] = std::chrono::duration<double, std::milli>(t.at - *t.first_seen).count();
      line["first_seen_us"] = wall(*t.first_seen);
    }
    if (!t.detail.empty()) line["detail"] = t.detail;
    log.write(line);
    moved |= t.event != TransitionEvent::Report && t.event != TransitionEvent::Ready &&
             t.event != TransitionEvent::Join && t.event != TransitionEvent::HeartbeatStale &&
             t.event != TransitionEvent::Injected;
  }
  answer_parked(now, tick_due, moved);
  if (tick_due)
    for (Conn* c : unadmitted)
      if (!c->closing && now - c->accepted_at > opt.hello_timeout) send_error(*c, "no hello before the deadline");
  // Only a connection touched this turn can have output waiting or have finished.
  for (size_t i = 0; i < touched.size(); ++i) {  // finish() never adds to it
    Conn& c = *touched[i];
    c.touched = false;
    if (!c.dead && !c.out.empty()) write_to(c);
    if (c.dead || (c.closing && c.out.empty())) finish(c, now);
  }
  touched.clear();
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

// Closes a finished connection; a member connection closing is D1.
void Coordinator::Impl::finish(Conn& c, TimePoint now) {
  // Gone between our challenge and its answer: a client whose token did not match our
  // proof (it refuses us first: elastic/auth.h), or a stranger that gave up.
  if (c.challenged)
    log.write({{"ts_us", rf::wall_us()}, {"event", "refused"}, {"cause", "challenge_unanswered"}, {"peer", c.peer}});
  report_lost(c, now);
  if (c.hello && c.role == Role::Launcher) --owner->launchers_;
  unpark(c);
  unadmitted.erase(&c);
  // Out of the epoll set first: close() alone leaves it there while another descriptor
  // shares the socket (a child the launcher forks holds a copy until its exec), and a later
  // event would name this Conn after it is freed.
  ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c.fd, nullptr);
  ::close(c.fd);
  conns.erase(c.self);
}

// A request that must wait: answered now if it can be, else indexed by its deadline and
// (kv_wait) its key.
void Coordinator::Impl::park(Conn& c, TimePoint now) {
  if (try_pending(c, now)) {
    c.pending.reset();
    return;
  }
  parked.insert(&c);
  c.deadline_at = deadlines.emplace(c.pending->deadline, &c);
  if (const auto* w = std::get_if<KvWait>(&c.pending->req))
    c.kv_waiting = kv_waiters.emplace(std::make_pair(w->generation, w->key), &c);
}

void Coordinator::Impl::unpark(Conn& c) {
  if (!parked.erase(&c)) return;
  deadlines.erase(c.deadline_at);
  if (c.kv_waiting) kv_waiters.erase(*c.kv_waiting);
  c.kv_waiting.reset();
  c.pending.reset();
}

void Coordinator::Impl::answer_parked(TimePoint now, bool tick_due, bool moved) {
  std::vector<Conn*> look;
  const auto key = std::make_tuple(membership.generation(), static_cast<int>(membership.phase()),
                                   membership.plan().has_value());
  if (key != parked_key || moved) {
    parked_key = key;
    for (Conn* c : parked)
      if (!std::holds_alternative<KvWait>(c->pending->req)) look.push_back(c);
  }
  for (const auto& k : kv_written)
    for (auto [it, end] = kv_waiters.equal_range(k); it != end; ++it) look.push_back(it->second);
  kv_written.clear();
  if (tick_due)
    for (auto it = deadlines.begin(); it != deadlines.end() && it->first <= now; ++it) look.push_back(it->second);
  for (Conn* c : look)
    if (parked.count(c) && !c->dead && try_pending(*c, now)) unpark(*c);
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
