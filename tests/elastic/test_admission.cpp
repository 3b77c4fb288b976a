// Admission by challenge and response (elastic/auth.h): HMAC-SHA256 against RFC 4231's
// vectors; a stranger who answers the challenge wrongly is refused and changes nothing; a
// client never sends the job token, and refuses a coordinator that cannot prove it holds it.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "base/clock.h"
#include "elastic/admin_client.h"
#include "elastic/auth.h"
#include "elastic/client.h"
#include "elastic/coordinator.h"
#include "elastic/frame.h"
#include "elastic/token.h"

using namespace rf::elastic;
using namespace std::chrono_literals;

namespace {

// One connected socket and frames over it, every wait bounded.
struct Raw {
  int fd = -1;
  FrameReader reader;
  explicit Raw(int port) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  }
  explicit Raw(int accepted, bool) : fd(accepted) {}
  ~Raw() { ::close(fd); }
  void send(const nlohmann::json& m) {
    const std::string b = encode_frame(m);
    REQUIRE(::send(fd, b.data(), b.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(b.size()));
  }
  // The next frame, or null json when the peer closed or 5 s passed.
  nlohmann::json next(std::string* raw = nullptr) {
    const auto deadline = rf::Clock::now() + 5s;
    while (rf::Clock::now() < deadline) {
      if (auto m = reader.next()) return parse_message(*m);
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) return nullptr;
      if (raw) raw->append(buf, static_cast<size_t>(n));
      reader.feed(buf, static_cast<size_t>(n));
    }
    return nullptr;
  }
};

CoordinatorOptions opts(const std::string& token) {
  CoordinatorOptions o;
  o.token = token;
  o.membership.target_world = 2;
  o.membership.min_world = 1;
  return o;
}

}  // namespace

TEST_CASE("HMAC-SHA256: RFC 4231 test cases 1 and 2") {
  CHECK(hmac_sha256_hex(std::string(20, '\x0b'), "Hi There") ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  CHECK(hmac_sha256_hex("Jefe", "what do ya want for nothing?") ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST_CASE("proofs bind both nonces and, for a client, who it claims to be") {
  const std::string t = "token-1234";
  const std::string base = client_proof(t, "ns", "nc", "member", 3, 0);
  CHECK(base.size() == 64);
  CHECK(client_proof(t, "ns", "nc", "member", 3, 0) == base);
  CHECK(client_proof(t, "ns2", "nc", "member", 3, 0) != base);
  CHECK(client_proof(t, "ns", "nc2", "member", 3, 0) != base);
  CHECK(client_proof(t, "ns", "nc", "member", 4, 0) != base);
  CHECK(client_proof(t, "ns", "nc", "member", 3, 1) != base);
  CHECK(client_proof(t, "ns", "nc", "launcher", 3, 0) != base);
  CHECK(client_proof("token-1235", "ns", "nc", "member", 3, 0) != base);
  CHECK(coordinator_proof(t, "nc", "ns") != coordinator_proof(t, "ns", "nc"));
}

TEST_CASE("a stranger who cannot answer the challenge is refused, and nothing changes") {
  const std::string token = random_token();
  Coordinator coord(opts(token));
  coord.start();
  {
    Raw s(coord.port());
    s.send({{"type", "hello"}, {"role", "member"}, {"slot", 0}, {"incarnation", 0}, {"nonce", random_token()}});
    const auto challenge = s.next();
    REQUIRE(challenge.is_object());
    CHECK(challenge["type"] == "challenge");
    CHECK_FALSE(challenge.dump().find(token) != std::string::npos);
    // A request before answering: refused as before hello.
    s.send({{"type", "auth"}, {"mac", std::string(64, '0')}});
    const auto refused = s.next();
    REQUIRE(refused.is_object());
    CHECK(refused["type"] == "error");
    CHECK(refused["error"].get<std::string>().find("wrong job token") != std::string::npos);
    CHECK(s.next().is_null());  // and the connection is closed
  }
  {
    Raw s(coord.port());  // straight to a request: refused before hello
    s.send({{"type", "kv_set"}, {"generation", 0}, {"key", "k"}, {"value", "00"}});
    const auto e = s.next();
    REQUIRE(e.is_object());
    CHECK(e["error"].get<std::string>().find("before hello") != std::string::npos);
  }
  // Nobody joined and nothing was stored: the job is as it was.
  AdminClient admin("127.0.0.1", coord.port(), token);
  const auto st = admin.status();
  CHECK(st.phase == Phase::Forming);
  CHECK(st.members.empty());
  CHECK_THROWS_AS(AdminClient("127.0.0.1", coord.port(), token + "x"), Refused);
}

TEST_CASE("a client never sends the token, and refuses a coordinator that cannot prove it holds it") {
  const std::string token = random_token();
  int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  REQUIRE(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(lfd, 4) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  std::string seen;  // every byte the client sent to the impostor
  std::thread impostor([&] {
    pollfd p{lfd, POLLIN, 0};
    if (::poll(&p, 1, 5000) <= 0) return;
    Raw c(::accept(lfd, nullptr, nullptr), true);
    const auto hello = c.next(&seen);
    if (!hello.is_object()) return;
    c.send({{"type", "challenge"}, {"nonce", random_token()}, {"proof", std::string(64, 'a')}});
    (void)c.next(&seen);  // whatever follows, until the client hangs up
  });
  ClientOptions o;
  o.port = ntohs(a.sin_port);
  o.token = token;
  o.slot = 0;
  o.connect_timeout = 5s;
  o.call_timeout = 5s;
  Client client(o);
  CHECK_THROWS_WITH_AS(client.join(), doctest::Contains("the coordinator's proof does not match this token"), Refused);
  impostor.join();
  ::close(lfd);
  CHECK(seen.find("\"hello\"") != std::string::npos);  // the impostor did hear the hello
  CHECK(seen.find(token) == std::string::npos);
  CHECK(seen.find("\"auth\"") == std::string::npos);   // and got no answer to its challenge
}

TEST_CASE("a standby replica's watch: admitted like any client, allowed no request, closed when the leader ends") {
  const std::string token = random_token();
  auto coord = std::make_unique<Coordinator>(opts(token));
  coord->start();
  Connection watch;
  const auto deadline = rf::Clock::now() + 5s;
  watch.connect("127.0.0.1", coord->port(), deadline);
  CHECK(authenticate(watch, token, {{"type", "hello"}, {"role", "replica"}}, deadline)["type"] == "welcome");
  CHECK_FALSE(watch.peer_closed(50));  // the leader serves: the watch stays open
  CHECK(coord->launcher_connections() == 0);  // a watch is no launcher (the job's end does not wait on it)
  Connection asks;
  asks.connect("127.0.0.1", coord->port(), deadline);
  authenticate(asks, token, {{"type", "hello"}, {"role", "replica"}}, deadline);
  CHECK_THROWS_WITH_AS(asks.call({{"type", "status"}}, deadline), doctest::Contains("only watches the leader"), Refused);
  coord.reset();  // the leader's process ends
  CHECK(watch.peer_closed(2000));
}
