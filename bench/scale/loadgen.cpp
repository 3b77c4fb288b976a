// rf_loadgen — N simulated members (and S spares) on one epoll loop, each speaking the
// coordinator's real wire protocol at the real cadence: a member and a caller connection,
// admission by challenge and response, report / plan / ready into generation 1, a heartbeat
// every heartbeat_ms (from the welcome) with the current step and its activity, and then
// two failures: one member's connections close (D1) and, once the job runs again, another
// falls silent with its connection open (D2, its lease). The spares fill both holes, so
// each round closes as soon as everyone reported (nobody moves state). At the end every
// member leaves (DONE). One JSON object on stdout with what it measured; scale_bench.py
// runs it against `ringfence coord` (alone, or as replicas on etcd) for each N.
//
//   rf_loadgen --coord HOST:PORT --token-file F --members N [--spares 2] [--steady-s 10]
//              [--step-ms 100] [--coord-pid PID]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/error.h"
#include "base/str.h"
#include "bench/flags.h"
#include "bench/scale/proc_sample.h"
#include "elastic/auth.h"
#include "elastic/frame.h"
#include "elastic/replies.h"
#include "elastic/token.h"
#include "elastic/wire.h"

using nlohmann::json;
using rf::Clock;
using rf::TimePoint;
namespace el = rf::elastic;

namespace {

int64_t us_since(TimePoint t0, TimePoint t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t - t0).count();
}

// A plan reply holds the whole plan (N ranks); a worker parses its own, but one thread
// parsing N of them would make this program the bottleneck. Its top-level fields are read
// from the text instead (the coordinator writes keys in order: error, generation, plan,
// status, type), and the plan is left out.
std::optional<json> plan_reply_head(const std::string& p) {
  if (p.size() < 4096 || p.find("\"type\":\"plan_reply\"", p.size() - 64) == std::string::npos) return std::nullopt;
  const auto g = p.find("\"generation\":");
  const auto st = p.rfind("\"status\":\"");
  if (g == std::string::npos || st == std::string::npos) return std::nullopt;
  const auto st_end = p.find('"', st + 10);
  json m = {{"type", "plan_reply"}, {"generation", std::stoull(p.substr(g + 13))}, {"error", ""},
            {"status", p.substr(st + 10, st_end - st - 10)}};
  m["plan"] = {{"generation", m["generation"]}};
  return m;
}

struct Link {
  int fd = -1;
  el::FrameReader reader;
  std::string out;
  std::string nonce;
  bool admitted = false;
  bool busy = false;  // one request outstanding (the protocol's rule)
  TimePoint sent;
};

enum class Call { None, Report, Plan, Ready, Leave };

struct Sim {
  int slot = 0;
  bool spare = false;
  Link link[2];  // 0: member (hello, heartbeats), 1: caller (report, plan, ready, leave)
  uint64_t active = 0;  // the generation it runs in (0: none yet)
  uint64_t revoked = 0;  // the newest revocation it saw
  Call call = Call::None;
  bool report_due = false;  // a revocation came while the caller was busy
  bool dead = false, silent = false, left = false;
  TimePoint next_hb;
  TimePoint revoke_seen, running_at;
};

class LoadGen {
 public:
  LoadGen(std::string host, int port, std::string token, int members, int spares, int step_ms)
      : host_(std::move(host)), port_(port), token_(std::move(token)), members_(members), step_ms_(step_ms) {
    ep_ = epoll_create1(EPOLL_CLOEXEC);
    sims_.resize(members + spares);
    for (int i = 0; i < members + spares; ++i) sims_[i].slot = i, sims_[i].spare = i >= members;
    rtts_us_.reserve(1 << 20);
  }

  json run(double steady_s, int coord_pid);

 private:
  void open(Sim& s, int which);
  void send(Sim& s, int which, json m);
  void pump(TimePoint until, const std::function<bool()>& done);
  void on_ready(Sim& s, int which, uint32_t events);
  void on_frame(Sim& s, int which, const json& m);
  void on_admitted(Sim& s, int which, const json& welcome);
  void on_caller_reply(Sim& s, const json& m);
  void report(Sim& s, uint64_t round);
  void heartbeats(TimePoint now);
  void drop(Sim& s);
  int64_t step_now(TimePoint now) const {
    return frozen_ >= 0 ? frozen_ : base_step_ + us_since(run_start_, now) / 1000 / step_ms_;
  }
  int running_in(uint64_t g) const {
    int n = 0;
    for (const auto& s : sims_) n += !s.dead && !s.silent && s.active >= g && s.running_at >= since_;
    return n;
  }
  json failure(Sim& victim, bool close);

  std::string host_;
  int port_;
  std::string token_;
  int members_, step_ms_;
  int ep_ = -1;
  std::vector<Sim> sims_;
  int64_t hb_ms_ = 100;
  int64_t lease_ms_ = 1000;
  int connecting_ = 0;
  size_t next_open_ = 0;
  bool record_rtt_ = false;
  std::vector<int32_t> rtts_us_;
  TimePoint run_start_ = Clock::now(), since_ = Clock::now();
  int64_t base_step_ = 0, frozen_ = -1;
  uint64_t generation_ = 1;  // the newest generation the job ran
  std::string failure_;
};

void LoadGen::open(Sim& s, int which) {
  Link& l = s.link[which];
  l.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (l.fd < 0) throw rf::Error(rf::str("socket: ", std::strerror(errno), " (raise ulimit -n)"));
  int one = 1;
  setsockopt(l.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port_));
  inet_pton(AF_INET, host_.c_str(), &a.sin_addr);
  if (::connect(l.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno != EINPROGRESS)
    throw rf::Error(rf::str("connect: ", std::strerror(errno)));
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLOUT;
  ev.data.u64 = (static_cast<uint64_t>(s.slot) << 1) | static_cast<uint64_t>(which);
  epoll_ctl(ep_, EPOLL_CTL_ADD, l.fd, &ev);
  l.nonce = el::random_token();
  json hello = {{"type", "hello"}, {"role", which == 0 ? "member" : "caller"}, {"slot", s.slot},
                {"incarnation", 0}, {"nonce", l.nonce}};
  send(s, which, hello);
  ++connecting_;
}

void LoadGen::send(Sim& s, int which, json m) {
  Link& l = s.link[which];
  if (l.fd < 0) return;
  l.out += el::encode_frame(std::move(m));
  l.busy = true;
  l.sent = Clock::now();
  while (!l.out.empty()) {
    const ssize_t n = ::send(l.fd, l.out.data(), l.out.size(), MSG_NOSIGNAL);
    if (n <= 0) break;  // EAGAIN (or not connected yet): EPOLLOUT finishes it
    l.out.erase(0, static_cast<size_t>(n));
  }
}

void LoadGen::on_ready(Sim& s, int which, uint32_t events) {
  Link& l = s.link[which];
  if (events & EPOLLOUT) {
    while (!l.out.empty()) {
      const ssize_t n = ::send(l.fd, l.out.data(), l.out.size(), MSG_NOSIGNAL);
      if (n <= 0) break;
      l.out.erase(0, static_cast<size_t>(n));
    }
    if (l.out.empty()) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = (static_cast<uint64_t>(s.slot) << 1) | static_cast<uint64_t>(which);
      epoll_ctl(ep_, EPOLL_CTL_MOD, l.fd, &ev);
    }
  }
  if (!(events & (EPOLLIN | EPOLLHUP | EPOLLERR))) return;
  char buf[16384];
  while (l.fd >= 0) {
    const ssize_t n = ::recv(l.fd, buf, sizeof buf, 0);
    if (n > 0) {
      l.reader.feed(buf, static_cast<size_t>(n));
      while (auto p = l.reader.next()) {
        auto head = plan_reply_head(*p);
        on_frame(s, which, head ? *head : el::parse_message(*p));
      }
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (!s.dead && !s.left && failure_.empty())
      failure_ = rf::str("slot ", s.slot, ": the coordinator closed its ", which ? "caller" : "member", " connection");
    drop(s);
    return;
  }
}

void LoadGen::drop(Sim& s) {
  for (auto& l : s.link)
    if (l.fd >= 0) ::close(l.fd), l.fd = -1;
}

void LoadGen::on_frame(Sim& s, int which, const json& m) {
  Link& l = s.link[which];
  l.busy = false;
  const std::string type = m.value("type", "");
  if (type == "error") {
    if (failure_.empty()) failure_ = rf::str("slot ", s.slot, ": ", m.value("error", "?"));
    return;
  }
  if (!l.admitted) {
    if (type == "challenge") {
      const std::string role = which == 0 ? "member" : "caller";
      send(s, which, {{"type", "auth"}, {"mac", el::client_proof(token_, m.at("nonce"), l.nonce, role, s.slot, 0)}});
    } else if (type == "welcome") {
      on_admitted(s, which, m);
    }
    return;
  }
  if (which == 1) return on_caller_reply(s, m);
  const auto r = el::decode_reply_as<el::HeartbeatReply>(m);
  const TimePoint now = Clock::now();
  if (record_rtt_) rtts_us_.push_back(static_cast<int32_t>(us_since(l.sent, now)));
  if (r.fenced && !s.silent && failure_.empty()) failure_ = rf::str("slot ", s.slot, " was fenced");
  if (s.active != 0 && r.generation > s.active && r.generation > s.revoked) {
    s.revoked = r.generation;
    s.revoke_seen = now;
    if (s.link[1].busy) s.report_due = true;
    else report(s, r.generation);
  }
}

void LoadGen::on_admitted(Sim& s, int which, const json& welcome) {
  s.link[which].admitted = true;
  --connecting_;
  if (which == 0) {
    const auto w = el::decode_reply_as<el::WelcomeReply>(welcome);
    hb_ms_ = w.heartbeat_ms.value_or(hb_ms_);
    lease_ms_ = w.lease_ms.value_or(lease_ms_);
    // Heartbeats spread evenly over the period, as independent processes' would be.
    s.next_hb = Clock::now() + std::chrono::microseconds(hb_ms_ * 1000 * s.slot / std::max<size_t>(1, sims_.size()));
    open(s, 1);
  } else {
    report(s, 0);  // "the next round that includes me"
  }
}

void LoadGen::report(Sim& s, uint64_t round) {
  const bool state = s.active != 0;
  s.call = Call::Report;
  send(s, 1, {{"type", "report"}, {"round", round}, {"has_state", state}, {"step", state ? step_now(Clock::now()) : -1},
              {"digest", state ? "x3:loadgen" : ""}, {"comm_generation", s.active}});
}

void LoadGen::on_caller_reply(Sim& s, const json& m) {
  auto plan = [&](uint64_t g) {
    s.call = Call::Plan;
    send(s, 1, {{"type", "plan"}, {"round", g}, {"timeout_ms", 60000}});
  };
  auto ready = [&](uint64_t g) {
    s.call = Call::Ready;
    send(s, 1, {{"type", "ready"}, {"generation", g}, {"timeout_ms", 60000}});
  };
  switch (s.call) {
    case Call::Report: {
      const auto a = el::decode_reply_as<el::Answer>(m);
      if (a.kind == el::Answer::Accepted) return plan(a.generation);
      if (a.kind == el::Answer::Stale) return report(s, a.generation == s.active ? s.active + 1 : a.generation);
      if (failure_.empty()) failure_ = rf::str("slot ", s.slot, ": report answered ", el::to_string(a.kind), " ", a.reason);
      return;
    }
    case Call::Plan: {  // (its plan left out: plan_reply_head)
      const std::string status = m.value("status", "");
      const uint64_t g = m.value("generation", uint64_t{0});
      if (status == "plan") return ready(m.at("plan").at("generation").get<uint64_t>());
      if (status == "timeout" || status == "pending") return plan(g);
      if (status == "revoked") return report(s, g);
      if (failure_.empty()) failure_ = rf::str("slot ", s.slot, ": plan answered ", status);
      return;
    }
    case Call::Ready: {
      const auto q = el::decode_reply_as<el::ReadyQuery>(m);
      if (q.kind == el::ReadyQuery::Running) {
        s.active = q.generation;
        s.running_at = Clock::now();
        s.call = Call::None;
        generation_ = std::max(generation_, q.generation);
        if (s.report_due && s.revoked > s.active) report(s, s.revoked);
        s.report_due = false;
        return;
      }
      if (q.kind == el::ReadyQuery::Pending) return ready(q.generation);
      if (q.kind == el::ReadyQuery::Revoked) return report(s, q.generation);
      if (failure_.empty()) failure_ = rf::str("slot ", s.slot, ": ready answered ", el::to_string(q.kind));
      return;
    }
    case Call::Leave:
      s.left = true;
      s.call = Call::None;
      drop(s);
      return;
    case Call::None:
      return;
  }
}

void LoadGen::heartbeats(TimePoint now) {
  const int64_t step = step_now(now);
  const int64_t into_step_us = us_since(run_start_, now) % (step_ms_ * 1000);
  for (auto& s : sims_) {
    Link& l = s.link[0];
    if (!l.admitted || l.fd < 0 || s.silent || l.busy || now < s.next_hb) continue;
    s.next_hb += std::chrono::milliseconds(hb_ms_);
    if (s.next_hb < now) s.next_hb = now + std::chrono::milliseconds(hb_ms_);
    json beat = {{"type", "heartbeat"}, {"generation", s.active}, {"step", s.active ? step : -1}};
    if (s.active)
      beat["activity"] = {{"kind", "compute"}, {"elapsed_us", into_step_us}, {"runnable_us", into_step_us},
                          {"bound_us", 10 * step_ms_ * 1000}, {"where", rf::str("step ", step)}};
    send(s, 0, std::move(beat));
  }
}

void LoadGen::pump(TimePoint until, const std::function<bool()>& done) {
  std::vector<epoll_event> evs(1024);
  while (!done()) {
    const TimePoint now = Clock::now();
    if (now >= until) throw rf::Error(rf::str("timed out; ", failure_.empty() ? "no error seen" : failure_));
    if (!failure_.empty()) throw rf::Error(failure_);
    // At most 256 handshakes in flight: the coordinator's listen backlog is finite.
    // (The caller connection opens once the member's join is answered, as a worker's.)
    while (next_open_ < sims_.size() && connecting_ < 256) open(sims_[next_open_++], 0);
    heartbeats(now);
    const int n = epoll_wait(ep_, evs.data(), static_cast<int>(evs.size()), 1);
    for (int i = 0; i < n; ++i) {
      Sim& s = sims_[evs[i].data.u64 >> 1];
      on_ready(s, static_cast<int>(evs[i].data.u64 & 1), evs[i].events);
    }
  }
}

json LoadGen::failure(Sim& victim, bool close) {
  // Survivors report the step they froze at (a real failure leaves every survivor at T).
  const TimePoint t0 = Clock::now();
  frozen_ = step_now(t0);
  since_ = t0;
  TimePoint last_hb = victim.link[0].sent;
  if (close) victim.dead = true, drop(victim);
  else victim.silent = true;
  const uint64_t g0 = generation_;
  const int expect = members_;
  pump(t0 + std::chrono::seconds(60), [&] { return running_in(g0 + 1) >= expect; });
  TimePoint first = TimePoint::max(), last = TimePoint::min(), run_last = TimePoint::min();
  for (const auto& s : sims_) {
    if (s.dead || s.silent || s.running_at < t0) continue;
    if (s.revoke_seen >= t0) first = std::min(first, s.revoke_seen), last = std::max(last, s.revoke_seen);
    run_last = std::max(run_last, s.running_at);
  }
  // The base of D2's timing: its lease counts from its last heartbeat's arrival.
  const TimePoint from = close ? t0 : last_hb;
  json j = {{"kind", close ? "connection_closed" : "lease_expired"},
            {"victim", victim.slot},
            {"t0_wall_us", rf::wall_us() - us_since(from, Clock::now())},
            {"first_revoke_ms", us_since(from, first) / 1e3},
            {"all_revoke_ms", us_since(from, last) / 1e3},
            {"revoke_to_running_ms", us_since(last, run_last) / 1e3},
            {"total_ms", us_since(from, run_last) / 1e3},
            {"generation", generation_}};
  if (!close) j["lease_ms"] = lease_ms_;
  base_step_ = frozen_;
  frozen_ = -1;
  run_start_ = Clock::now();
  return j;
}

json LoadGen::run(double steady_s, int coord_pid) {
  json out = {{"members", members_}, {"spares", static_cast<int>(sims_.size()) - members_}, {"step_ms", step_ms_}};
  const TimePoint t0 = Clock::now();
  pump(t0 + std::chrono::seconds(120), [&] { return running_in(1) >= members_; });
  out["formation_ms"] = us_since(t0, Clock::now()) / 1e3;
  out["heartbeat_ms"] = hb_ms_;
  run_start_ = Clock::now();
  // Settle (every member's heartbeats started), then the steady state: the coordinator's CPU
  // and memory, and every heartbeat's round trip.
  const TimePoint settle = Clock::now() + std::chrono::milliseconds(2 * hb_ms_);
  pump(settle + std::chrono::seconds(1), [&] { return Clock::now() >= settle; });
  const ProcSample c0 = ProcSample::of(coord_pid), g0 = ProcSample::of(getpid());
  record_rtt_ = true;
  const TimePoint end = Clock::now() + std::chrono::duration_cast<rf::Duration>(std::chrono::duration<double>(steady_s));
  pump(end + std::chrono::seconds(1), [&] { return Clock::now() >= end; });
  record_rtt_ = false;
  const ProcSample c1 = ProcSample::of(coord_pid), g1 = ProcSample::of(getpid());
  std::vector<int32_t> r = rtts_us_;
  std::sort(r.begin(), r.end());
  auto pct = [&](double p) { return r.empty() ? 0.0 : r[std::min(r.size() - 1, static_cast<size_t>(p * r.size()))] / 1e3; };
  const double secs = std::chrono::duration<double>(c1.at - c0.at).count();
  out["steady"] = {{"seconds", secs},
                   {"heartbeats", r.size()},
                   {"heartbeats_per_s", r.size() / secs},
                   {"rtt_p50_ms", pct(0.50)},
                   {"rtt_p99_ms", pct(0.99)},
                   {"rtt_max_ms", r.empty() ? 0.0 : r.back() / 1e3},
                   {"coord_cpu_pct", c1.cpu_pct_since(c0)},
                   {"coord_rss_mb", c1.rss_kb / 1024.0},
                   {"loadgen_cpu_pct", g1.cpu_pct_since(g0)}};
  out["failures"] = json::array();
  out["failures"].push_back(failure(sims_[static_cast<size_t>(members_ / 2)], true));
  pump(Clock::now() + std::chrono::seconds(1), [&] { return true; });
  out["failures"].push_back(failure(sims_[static_cast<size_t>(members_ / 3)], false));
  // Every member leaves: DONE.
  const TimePoint l0 = Clock::now();
  for (auto& s : sims_)
    if (!s.dead && !s.silent && s.link[1].fd >= 0) {
      s.call = Call::Leave;
      send(s, 1, {{"type", "leave"}, {"step", step_now(l0)}});
    }
  pump(l0 + std::chrono::seconds(60), [&] {
    return std::all_of(sims_.begin(), sims_.end(), [](const Sim& s) { return s.dead || s.silent || s.left || s.spare; });
  });
  out["leave_ms"] = us_since(l0, Clock::now()) / 1e3;
  for (auto& s : sims_) drop(s);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string coord, token_file;
  int members = 64, spares = 2, step_ms = 100, coord_pid = 0;
  double steady_s = 10;
  rf::bench::Flags flags("rf_loadgen", "rf_loadgen --coord HOST:PORT --token-file F [flags]\n"
                                       "N simulated members against a ringfence coordinator (bench/scale)");
  flags.text("--coord", "HOST:PORT", "the coordinator (required)", coord)
      .text("--token-file", "FILE", "the job token (required)", token_file)
      .integer("--members", "simulated members, the coordinator's -n (default 64)", members, 1, 1'000'000)
      .integer("--spares", "simulated spares; each failure takes one (default 2)", spares, 2, 1000)
      .integer("--step-ms", "simulated step time (default 100)", step_ms, 1, 100000)
      .integer("--coord-pid", "the coordinator's process: CPU and memory from /proc (required)", coord_pid, 1)
      .value("--steady-s", "S", "seconds of steady state measured (default 10)",
             [&](const std::string& f, const std::string& v) { steady_s = rf::bench::parse_float_flag(f, v, 0.0); });
  if (const int rc = flags.parse_or_exit_code(argc, argv); rc >= 0) return rc;
  if (coord.empty() || token_file.empty() || coord_pid == 0)
    return flags.fail("--coord, --token-file and --coord-pid are required");
  try {
    // Two connections per simulated member.
    rlimit lim{};
    getrlimit(RLIMIT_NOFILE, &lim);
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
    const auto [host, port] = el::parse_host_port(coord);
    LoadGen g(host, port, el::read_token_file(token_file), members, spares, step_ms);
    std::printf("%s\n", g.run(steady_s, coord_pid).dump().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rf_loadgen: %s\n", e.what());
    return 1;
  }
}
