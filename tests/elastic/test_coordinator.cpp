// The coordinator server with in-process clients over loopback TCP: the whole handshake,
// the store, revocation delivered by heartbeat, self-fencing (D4), wrong tokens and bad
// frames. Short heartbeats/leases keep it fast; waits are on conditions with deadlines.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <future>
#include <mutex>

#include "base/str.h"
#include "elastic/admin_client.h"
#include "elastic/client.h"
#include "elastic/coordinator.h"
#include "elastic/frame.h"
#include "elastic/token.h"

using namespace rf::elastic;
using namespace std::chrono_literals;

namespace {

CoordinatorOptions opts(int world, const std::string& token) {
  CoordinatorOptions o;
  o.token = token;
  o.membership.target_world = world;
  o.membership.min_world = 1;
  o.membership.heartbeat = 20ms;
  o.membership.lease = 300ms;
  o.membership.join_window = 500ms;
  return o;
}

ClientOptions copts(const Coordinator& c, const std::string& token, int slot, int64_t inc = 0) {
  ClientOptions o;
  o.port = c.port();
  o.token = token;
  o.slot = slot;
  o.incarnation = inc;
  o.connect_timeout = 5s;
  o.call_timeout = 5s;
  return o;
}

StateReport at(int64_t step) { return StateReport{true, step, "digest-" + std::to_string(step)}; }

// A one-shot flag with a deadline: callbacks set it, the test waits on it.
struct Signal {
  std::mutex mu;
  std::condition_variable cv;
  bool set = false;
  std::string text;
  void fire(std::string t = "") {
    std::lock_guard<std::mutex> l(mu);
    set = true;
    text = std::move(t);
    cv.notify_all();
  }
  bool wait(rf::Duration d) {
    std::unique_lock<std::mutex> l(mu);
    return cv.wait_for(l, d, [&] { return set; });
  }
};

// A plain TCP connection to the coordinator on loopback.
int connect_raw(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  return fd;
}

// Raw socket: sends bytes, returns what comes back until the server closes (bounded).
std::string raw_exchange(int port, const std::string& bytes) {
  const int fd = connect_raw(port);
  REQUIRE(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size()));
  ::shutdown(fd, SHUT_WR);  // we send nothing more: the server sees EOF after the bytes
  std::string got;
  char buf[4096];
  const auto deadline = rf::Clock::now() + 5s;
  while (rf::Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;  // closed by the server: what we want
    got.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return got;
}

std::string error_text(const std::string& wire) {
  FrameReader r;
  r.feed(wire.data(), wire.size());
  auto p = r.next();
  if (!p) return "";
  auto m = parse_message(*p);
  return m.value("type", "") == "error" ? m.value("error", "") : "";
}

}  // namespace

// A member's fatal report stops the job; the other member, in the middle of a step, must
// hear it from its heartbeat (on_stopped, to abort its collective) rather than only at
// its next call to the coordinator — without a launcher to kill it, it would otherwise
// wait out its collective's deadline for a peer that has exited.
TEST_CASE("a fatal report stops the job, and a running member hears it by heartbeat") {
  const std::string token = random_token();
  Coordinator coord(opts(2, token));
  coord.start();
  Client a(copts(coord, token, 0)), b(copts(coord, token, 1));
  Signal stopped, revoked;
  a.on_stopped([&] { stopped.fire(); });
  a.on_revoked([&](const Revocation& r) { revoked.fire(r.cause ? to_string(*r.cause) : "?"); });
  a.join();
  b.join();
  auto fb = std::async(std::launch::async, [&] { return b.next_plan([] { return at(-1); }, 5s); });
  a.next_plan([] { return at(-1); }, 5s);
  fb.get();
  auto rb = std::async(std::launch::async, [&] { return b.ready(1, 5s); });
  REQUIRE(a.ready(1, 5s).kind == ReadyQuery::Running);
  REQUIRE(rb.get().kind == ReadyQuery::Running);
  a.set_step(0);
  b.fatal("--ckpt-dir D already holds checkpoints");
  REQUIRE(stopped.wait(5s));
  CHECK(coord.phase() == Phase::Stopped);
  CHECK_FALSE(revoked.set);  // a stop is not a new generation
  // a's next call names the error.
  try {
    a.next_plan([] { return at(0); }, 5s);
    FAIL("next_plan after a stop must throw");
  } catch (const JobStopped& e) {
    CHECK(std::string(e.what()).find("already holds checkpoints") != std::string::npos);
  }
}

TEST_CASE("two workers form, run, exchange addresses, and one failure revokes the other by heartbeat") {
  const std::string token = random_token();
  Coordinator coord(opts(2, token));
  coord.start();
  Client a(copts(coord, token, 0)), b(copts(coord, token, 1));
  Signal revoked;
  a.on_revoked([&](const Revocation& r) { revoked.fire(rf::str(r.cause ? to_string(*r.cause) : "?", "/", r.generation)); });
  CHECK(a.join().target_world == 2);
  b.join();
  auto fb = std::async(std::launch::async, [&] { return b.next_plan([] { return at(-1); }, 5s); });
  Plan pa = a.next_plan([] { return at(-1); }, 5s);
  Plan pb = fb.get();
  CHECK(pa.generation == 1);
  CHECK(pa.world() == 2);
  CHECK(pb.ranks[1].worker.slot == 1);
  // Step 5: addresses in the store, scoped by generation.
  a.kv_set(1, "addr/0", std::string("\x01\x02", 2));
  CHECK(b.kv_wait(1, "addr/0", 2s) == std::string("\x01\x02", 2));
  CHECK_FALSE(b.kv_get(2, "addr/0"));
  CHECK_THROWS_AS(b.kv_wait(1, "addr/9", 50ms), CallTimeout);
  CHECK(a.kv_cas(1, "leader", std::nullopt, "a"));
  CHECK_FALSE(b.kv_cas(1, "leader", std::nullopt, "b"));
  auto rb = std::async(std::launch::async, [&] { return b.ready(1, 5s); });
  CHECK(a.ready(1, 5s).kind == ReadyQuery::Running);
  CHECK(rb.get().kind == ReadyQuery::Running);
  CHECK(a.generation() == 1);
  a.set_step(3);
  b.set_step(3);
  // b dies without leaving: its member connection closes (D1). The revocation must come
  // from that close (cause connection_closed), not from b's lease running out (300 ms
  // later, cause lease_expired); a's heartbeat reply then carries generation 2. Latency
  // is read off the coordinator's own record below, not this test's clock (ctest -j and
  // ASan make a test thread's wall time meaningless at this scale).
  b.close();
  REQUIRE(revoked.wait(5s));
  CHECK(revoked.text == "connection_closed/2");
  // a reports, the window passes, the group shrinks to 1.
  Plan p2 = a.next_plan([] { return at(3); }, 5s);
  CHECK(p2.generation == 2);
  CHECK(p2.world() == 1);
  CHECK(a.ready(2, 5s).kind == ReadyQuery::Running);
  AdminClient admin("127.0.0.1", coord.port(), token);
  auto st = admin.status();
  CHECK(st.phase == Phase::Running);
  CHECK(st.generation == 2);
  CHECK(st.recoveries == 1);
  CHECK(admin.summary().fired.empty());
  a.injected(2, 4, "slow:rank=0:step=4");  // a worker about to fire a step= spec says so first
  auto sum = admin.summary().raw;
  REQUIRE(sum["fired"].size() == 1);
  CHECK(sum["fired"][0]["spec"] == "slow:rank=0:step=4");
  CHECK(sum["fired"][0]["slot"] == 0);
  CHECK(sum["fired"][0]["step"] == 4);
  CHECK(sum["fired"][0]["generation"] == 2);
  REQUIRE(sum["recoveries"].size() == 1);
  CHECK(sum["recoveries"][0]["cause"] == "connection_closed");
  CHECK(sum["recoveries"][0]["total_ms"].is_number());
  // D1 (docs/protocol.md): revoked within 100 ms of the failure being visible (the close).
  CHECK(sum["recoveries"][0]["detect_ms"].get<double>() >= 0.0);
  CHECK(sum["recoveries"][0]["detect_ms"].get<double>() < 100.0);
  a.leave();
  const auto deadline = rf::Clock::now() + 2s;
  while (!coord.finished() && rf::Clock::now() < deadline) admin.status();  // each call is a loop turn
  CHECK(coord.phase() == Phase::Done);
  // A restart of b that starts up only now finds the job over: JobFinished (its program
  // ends cleanly, as a spare's plan answering done does), not Refused (an error exit).
  Client late(copts(coord, token, 1, 1));
  CHECK_THROWS_AS(late.join(), JobFinished);
}

// Step 5 failed on one rank (its connect timed out): it goes back to step 2 while the round
// of g, planned, waits for every rank's ready. The round after g is not open until g is
// revoked, and the worker waits for that instead of asking again (it once spun through its
// 1000 attempts in milliseconds and exited saying it got no plan within its timeout).
TEST_CASE("a worker that left its planned round waits for the revocation, then gets the next plan") {
  const std::string token = random_token();
  Coordinator coord(opts(2, token));
  coord.start();
  Client a(copts(coord, token, 0)), b(copts(coord, token, 1));
  a.join();
  b.join();
  auto fa = std::async(std::launch::async, [&] { return a.next_plan([] { return at(-1); }, 5s); });
  const Plan pb = b.next_plan([] { return at(-1); }, 5s);
  REQUIRE(fa.get().generation == pb.generation);
  auto again = std::async(std::launch::async, [&] { return a.next_plan([] { return at(-1); }, 5s); });
  CHECK(again.wait_for(600ms) == std::future_status::timeout);  // waiting, not failed
  // b's connect failed too, and it reports it (Recovery::connect): g is revoked.
  REQUIRE(b.failure_report(pb.generation, -1, std::nullopt, "connect failed").ok());
  auto fb = std::async(std::launch::async, [&] { return b.next_plan([] { return at(-1); }, 5s); });
  CHECK(again.get().generation == pb.generation + 1);
  CHECK(fb.get().generation == pb.generation + 1);
}

// A worker whose GPU is stuck reports itself (kind gpu_stuck): the coordinator evicts it (the
// other member hears the revocation, cause gpu_stuck; it is fenced), and the survivor, which
// kept generation 1's communicator, gets a plan that shrinks it (Plan::shrink_from, over the wire).
TEST_CASE("a gpu_stuck report evicts its sender; the survivor's plan shrinks the old communicator") {
  const std::string token = random_token();
  Coordinator coord(opts(2, token));
  coord.start();
  Client a(copts(coord, token, 0)), b(copts(coord, token, 1));
  Signal revoked, fenced;
  a.on_revoked([&](const Revocation& r) { revoked.fire(rf::str(r.cause ? to_string(*r.cause) : "?", "/", r.generation)); });
  b.on_fenced([&](const std::string& why) { fenced.fire(why); });
  a.join();
  b.join();
  auto fb = std::async(std::launch::async, [&] { return b.next_plan([] { return at(-1); }, 5s); });
  CHECK(a.next_plan([] { return at(-1); }, 5s).shrink_from == 0u);  // forming: afresh
  fb.get();
  auto rb = std::async(std::launch::async, [&] { return b.ready(1, 5s); });
  REQUIRE(a.ready(1, 5s).kind == ReadyQuery::Running);
  REQUIRE(rb.get().kind == ReadyQuery::Running);
  CHECK(b.failure_report(1, 3, 1, "its start event never completed", FailureKind::gpu_stuck).ok());
  REQUIRE(revoked.wait(5s));
  CHECK(revoked.text == "gpu_stuck/2");
  REQUIRE(fenced.wait(5s));
  StateReport kept = at(3);
  kept.comm_generation = 1;
  const Plan p2 = a.next_plan([&] { return kept; }, 5s);
  CHECK(p2.generation == 2u);
  CHECK(p2.world() == 1);
  CHECK(p2.shrink_from == 1u);
  CHECK(a.ready(2, 5s).kind == ReadyQuery::Running);
  AdminClient admin("127.0.0.1", coord.port(), token);
  auto sum = admin.summary().raw;
  REQUIRE(sum["recoveries"].size() == 1);
  CHECK(sum["recoveries"][0]["cause"] == "gpu_stuck");
  CHECK(sum["recoveries"][0]["rounds"] == 1);
}

TEST_CASE("wrong token is refused with an error reply") {
  const std::string token = random_token();
  Coordinator coord(opts(1, token));
  coord.start();
  Client bad(copts(coord, "not-the-token", 0));
  CHECK_THROWS_WITH_AS(bad.join(), doctest::Contains("wrong job token"), Refused);
  CHECK_THROWS_AS(AdminClient("127.0.0.1", coord.port(), token + "x"), Refused);
  // The right token still works afterwards.
  Client good(copts(coord, token, 0));
  CHECK_NOTHROW(good.join());
}

TEST_CASE("malformed frames get an error reply and the connection is closed; the server keeps serving") {
  const std::string token = random_token();
  Coordinator coord(opts(1, token));
  coord.start();
  std::string big(4, '\xff');
  CHECK(error_text(raw_exchange(coord.port(), big)).find("exceeds the limit") != std::string::npos);
  CHECK(error_text(raw_exchange(coord.port(), std::string("\x00\x00\x00\x05hello", 9))) == "frame is not valid JSON");
  CHECK(error_text(raw_exchange(coord.port(), encode_frame({{"type", "status"}}))).find("before hello") !=
        std::string::npos);
  CHECK(error_text(raw_exchange(coord.port(), encode_frame({{"type", "hello"}, {"nonce", random_token()}, {"role", "member"},
                                                            {"slot", "zero"}, {"incarnation", 0}})))
            .find("'slot'") != std::string::npos);
  // A truncated frame followed by a hang-up: nothing to answer, no crash.
  CHECK(raw_exchange(coord.port(), std::string("\x00\x00\x01\x00{\"v\":", 9)).empty());
  AdminClient admin("127.0.0.1", coord.port(), token);
  CHECK(admin.status().phase == Phase::Forming);
}

TEST_CASE("D4: a worker that cannot renew its lease fences itself within about one lease") {
  const std::string token = random_token();
  auto coord = std::make_unique<Coordinator>(opts(1, token));
  coord->start();
  Client a(copts(*coord, token, 0));
  Signal fenced;
  rf::TimePoint fenced_at;  // written before fire(): the Signal's mutex publishes it
  a.on_fenced([&](const std::string& why) {
    fenced_at = rf::Clock::now();
    fenced.fire(why);
  });
  a.join();
  Plan p = a.next_plan([] { return at(-1); }, 5s);
  REQUIRE(a.ready(p.generation, 5s).kind == ReadyQuery::Running);
  // The coordinator's loop stops but its sockets stay open: heartbeats get no reply,
  // exactly like a coordinator cut off by the network.
  coord->stop();
  // The fence is timed against the client's own last renewal (the rule: a worker that
  // cannot renew for one lease fences), so a slow test thread cannot make it look early
  // or late. Never before one lease: fencing early would drop a healthy worker.
  REQUIRE(fenced.wait(5s));
  const auto after_renewal = fenced_at - a.last_renewal();
  MESSAGE("D4: fenced ", std::chrono::duration<double, std::milli>(after_renewal).count(),
          " ms after the last renewal (lease 300 ms)");
  CHECK(after_renewal >= 300ms);
  // ... and not much after: the renewal's own deadline is last renewal + lease, so what
  // is left is the heartbeat thread's wake-up; two leases leave room for a loaded box.
  CHECK(after_renewal < 600ms);
  CHECK(a.fenced());
  CHECK(fenced.text.find("could not renew the lease") != std::string::npos);
}

TEST_CASE("a worker the coordinator no longer counts is told so in its next heartbeat and fences itself") {
  const std::string token = random_token();
  Coordinator coord(opts(2, token));
  coord.start();
  Client old_inc(copts(coord, token, 0, 0));
  Signal fenced;
  old_inc.on_fenced([&](const std::string& why) { fenced.fire(why); });
  old_inc.join();
  // The launcher restarted slot 0 (it believed the old process dead): the new incarnation
  // replaces the old one, whose next heartbeat is answered "fenced".
  Client new_inc(copts(coord, token, 0, 1));
  new_inc.join();
  REQUIRE(fenced.wait(2s));
  CHECK(fenced.text == "the coordinator evicted this worker");
  // It cannot come back under its old incarnation.
  CHECK_THROWS_WITH_AS(old_inc.join(), doctest::Contains("stale incarnation"), Refused);
}

TEST_CASE("a connection that never says hello is closed after the hello timeout") {
  const std::string token = random_token();
  CoordinatorOptions o = opts(1, token);
  o.hello_timeout = 100ms;
  Coordinator coord(o);
  coord.start();
  const int fd = connect_raw(coord.port());
  std::string got;
  char buf[4096];
  const auto t0 = rf::Clock::now();
  while (rf::Clock::now() - t0 < 5s) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  CHECK(rf::Clock::now() - t0 < 2s);
  CHECK(error_text(got) == "no hello before the deadline");
}

TEST_CASE("a connection that closes while a forked child still holds its socket is never used after it is freed") {
  // The launcher runs the coordinator in its own process and forks its workers: until a
  // child's exec, it holds a copy of every socket of the coordinator's. A connection the
  // coordinator closes then stays in its epoll set unless it is removed explicitly, and its
  // end-of-file is reported on every later turn, naming a freed connection (a crash, or a
  // heap-use-after-free under ASan).
  const std::string token = random_token();
  Coordinator coord(opts(2, token));
  coord.start();
  std::vector<int> fds;
  for (int i = 0; i < 4; ++i) {  // each gets as far as the challenge: the server holds its socket
    const int fd = connect_raw(coord.port());
    const std::string hello = encode_frame({{"type", "hello"}, {"nonce", random_token()}, {"role", "caller"},
                                            {"slot", i}, {"incarnation", 0}});
    REQUIRE(::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(hello.size()));
    pollfd p{fd, POLLIN, 0};
    REQUIRE(::poll(&p, 1, 5000) == 1);  // the challenge: the connection exists on the server
    fds.push_back(fd);
  }
  int gate[2];
  REQUIRE(::pipe(gate) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // holds the parent's descriptors (the server's sockets too) until released
    ::close(gate[1]);  // its own copy of the write end: else the read below never ends
    for (int fd : fds) ::close(fd);  // the clients' ends: only the server's sockets stay shared
    char b;
    [[maybe_unused]] ssize_t n = ::read(gate[0], &b, 1);
    ::_exit(0);
  }
  ::close(gate[0]);
  for (int fd : fds) ::close(fd);  // the server reads end-of-file and closes its sockets
  // Many loop turns while the child still holds them: every one would report them again.
  AdminClient admin("127.0.0.1", coord.port(), token);
  const auto until = rf::Clock::now() + 300ms;
  while (rf::Clock::now() < until) CHECK(admin.status().phase == Phase::Forming);
  ::close(gate[1]);  // the child exits
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(admin.status().phase == Phase::Forming);
}
