// EtcdClient (elastic/etcd_client.h) against a real 3-member etcd cluster on loopback
// (tests/elastic/etcd_cluster.h): reads, writes, compare-and-swap on revisions, leases that
// expire, and a member killed under a client that goes on with the others. The pure parts
// (base64, endpoint lists) need no cluster. Without an etcd binary the program prints why
// and exits 77 (skipped).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "base/clock.h"
#include "elastic/etcd_client.h"
#include "elastic/leadership.h"
#include "tests/elastic/etcd_cluster.h"

using namespace rf::elastic;
using namespace std::chrono_literals;

namespace {

testing::EtcdCluster& cluster() {
  static std::unique_ptr<testing::EtcdCluster> c = [] {
    auto x = std::make_unique<testing::EtcdCluster>(3);
    REQUIRE(x->start());
    return x;
  }();
  return *c;
}

EtcdClient client() { return EtcdClient({cluster().urls(), 2s}); }

}  // namespace

TEST_CASE("base64 round-trips any bytes; endpoint lists are checked") {
  for (const std::string& s : {std::string(), std::string("a"), std::string("ab"), std::string("abc"),
                              std::string("abcd"), std::string("\0\xff\x10 x", 5)}) {
    CHECK(base64_decode(base64_encode(s)) == s);
  }
  CHECK(base64_encode("foo") == "Zm9v");
  CHECK_THROWS_AS(base64_decode("abc"), rf::Error);
  CHECK(parse_etcd_endpoints("127.0.0.1:2379,http://h:1/") ==
        std::vector<std::string>{"http://127.0.0.1:2379", "http://h:1"});
  CHECK_THROWS_WITH_AS(parse_etcd_endpoints(""), doctest::Contains("no etcd endpoint"), rf::InvalidInput);
  CHECK_THROWS_WITH_AS(parse_etcd_endpoints("ftp://h:1"), doctest::Contains("'ftp://h:1'"), rf::InvalidInput);
  CHECK_THROWS_WITH_AS(parse_etcd_endpoints("hostonly"), doctest::Contains("HOST:PORT"), rf::InvalidInput);
}

TEST_CASE("put, get, prefix, delete") {
  EtcdClient c = client();
  const int64_t r1 = c.put("/t/a", "1");
  const int64_t r2 = c.put("/t/b", std::string("\0two", 4));
  CHECK(r2 > r1);
  const auto a = c.get("/t/a");
  REQUIRE(a.has_value());
  CHECK(a->value == "1");
  CHECK(a->mod_revision == r1);
  CHECK(c.get("/t/b")->value == std::string("\0two", 4));
  CHECK_FALSE(c.get("/t/none").has_value());
  c.put("/tx", "not in the prefix /t/");
  const auto all = c.get_prefix("/t/");
  REQUIRE(all.size() == 2);
  CHECK(all[0].key == "/t/a");
  CHECK(all[1].key == "/t/b");
  CHECK(c.del("/t/a"));
  CHECK_FALSE(c.del("/t/a"));
  CHECK_FALSE(c.get("/t/a").has_value());
}

TEST_CASE("compare-and-swap: create once, then only from the revision read") {
  EtcdClient c = client();
  int64_t rev = 0;
  CHECK(c.cas("/cas/gen", 0, "1", 0, &rev));  // create
  std::optional<EtcdKv> now;
  CHECK_FALSE(c.cas("/cas/gen", 0, "1", 0, nullptr, &now));  // a second creator loses
  REQUIRE(now.has_value());
  CHECK(now->value == "1");
  CHECK(now->mod_revision == rev);
  int64_t rev2 = 0;
  CHECK(c.cas("/cas/gen", rev, "2", 0, &rev2));  // the writer that read rev wins
  CHECK(rev2 > rev);
  CHECK_FALSE(c.cas("/cas/gen", rev, "3", 0, nullptr, &now));  // a stale writer loses
  CHECK(now->value == "2");
  CHECK(c.get("/cas/gen")->value == "2");
}

TEST_CASE("a key on a lease disappears when the lease is not kept alive") {
  EtcdClient c = client();
  const int64_t lease = c.lease_grant(1);
  CHECK(lease != 0);
  c.put("/lease/leader", "me", lease);
  CHECK(c.lease_keepalive(lease) > 0);
  CHECK(c.get("/lease/leader")->lease == lease);
  const rf::TimePoint end = rf::Clock::now() + 10s;
  while (c.get("/lease/leader").has_value() && rf::Clock::now() < end) std::this_thread::sleep_for(50ms);
  CHECK_FALSE(c.get("/lease/leader").has_value());
  CHECK(c.lease_keepalive(lease) == 0);
  const int64_t other = c.lease_grant(5);
  c.put("/lease/x", "y", other);
  c.lease_revoke(other);
  CHECK_FALSE(c.get("/lease/x").has_value());
}

TEST_CASE("a transaction applies all of its writes only when every compare holds") {
  EtcdClient c = client();
  int64_t rev = 0;
  REQUIRE(c.txn({{EtcdCompare::Create, "/txn/guard", 0}}, {EtcdOp::put("/txn/guard", "g"), EtcdOp::put("/txn/a", "1")}, &rev));
  const int64_t guard_rev = c.get("/txn/guard")->create_revision;
  CHECK(guard_rev == rev);
  CHECK_FALSE(c.txn({{EtcdCompare::Create, "/txn/guard", guard_rev + 100}}, {EtcdOp::put("/txn/a", "2")}));
  CHECK(c.get("/txn/a")->value == "1");
  c.put("/txn/r/1", "x");
  c.put("/txn/r/2", "y");
  c.put("/txn/r/3", "z");
  CHECK(c.txn({{EtcdCompare::Create, "/txn/guard", guard_rev}},
              {EtcdOp::put("/txn/a", "3"), EtcdOp::erase("/txn/r/1", "/txn/r/3")}));
  CHECK(c.get("/txn/a")->value == "3");
  CHECK(c.get_prefix("/txn/r/").size() == 1);  // [1, 3): 1 and 2 gone, 3 kept
}

TEST_CASE("leadership: one replica leads, a standby takes over when it resigns, the old one cannot write") {
  const LeadershipOptions lo{cluster().urls(), "lead1", 1s};
  EtcdClient c = client();
  auto a = std::make_unique<Leadership>(lo, "a");
  REQUIRE(a->campaign("127.0.0.1:1001", [] { return false; }));
  CHECK(a->leading(rf::Clock::now()));
  a->commit({EtcdOp::put("state", "from a")});
  CHECK(c.get(control_prefix("lead1") + "state")->value == "from a");
  auto who = find_leader(c, "lead1");
  REQUIRE(who.has_value());
  CHECK(who->id == "a");
  CHECK(who->addr == "127.0.0.1:1001");

  Leadership b(lo, "b");
  int polls = 0;  // while a leads, b's campaign only polls (stopped after 10 looks)
  CHECK_FALSE(b.campaign("127.0.0.1:1002", [&] { return ++polls > 10; }));
  a->resign();
  CHECK_FALSE(a->leading(rf::Clock::now()));
  REQUIRE(b.campaign("127.0.0.1:1002", [] { return false; }));
  CHECK(find_leader(c, "lead1")->id == "b");
  b.commit({EtcdOp::put("state", "from b")});
  CHECK_THROWS_AS(a->commit({EtcdOp::put("state", "stale a")}), NotLeader);
  CHECK(c.get(control_prefix("lead1") + "state")->value == "from b");
}

TEST_CASE("a leader whose key is gone cannot write, even before its lease says so") {
  const LeadershipOptions lo{cluster().urls(), "lead2", 2s};
  EtcdClient c = client();
  Leadership a(lo, "a");
  REQUIRE(a.campaign("127.0.0.1:1001", [] { return false; }));
  a.commit({EtcdOp::put("state", "g1")});
  // What a lease expiry does while a is cut off: its key vanishes and another replica wins.
  c.lease_revoke(c.get(control_prefix("lead2") + "leader")->lease);
  Leadership b(lo, "b");
  REQUIRE(b.campaign("127.0.0.1:1002", [] { return false; }));
  b.commit({EtcdOp::put("state", "g2")});
  CHECK_THROWS_WITH_AS(a.commit({EtcdOp::put("state", "g2 from a")}), doctest::Contains("another replica"), NotLeader);
  CHECK_FALSE(a.leading(rf::Clock::now()));
  CHECK(c.get(control_prefix("lead2") + "state")->value == "g2");
}

TEST_CASE("a leader's etcd calls are bounded by a sixth of its lease, even against a member that never answers") {
  // A socket that accepts connections (the kernel's backlog) and never answers: a member hung
  // or cut off behind a proxy. Without a per-call timeout a call would wait for ever.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(fd, 16) == 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const std::string silent = "http://127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  Leadership lead(LeadershipOptions{{silent}, "bounded", 3s}, "a");
  const rf::TimePoint t0 = rf::Clock::now();
  CHECK_THROWS_AS(lead.leader_now(), EtcdUnavailable);
  const double s = std::chrono::duration<double>(rf::Clock::now() - t0).count();
  MESSAGE("a call to a silent member gave up after ", s, " s (lease 3 s)");
  CHECK(s >= 0.4);
  CHECK(s < 1.0);  // 3 s / 6 = 0.5 s
  ::close(fd);
  CHECK_THROWS_AS(EtcdClient(EtcdOptions{{silent}, std::chrono::microseconds(10)}), rf::InvalidInput);
}

TEST_CASE("a member killed: the client goes on with the others") {
  EtcdClient c = client();
  c.put("/m/before", "1");
  cluster().kill_member(0);  // the first endpoint, where the client starts
  const rf::TimePoint t = rf::Clock::now();
  // Writes need the cluster's leader; if member 0 led, the others elect a new one first.
  bool wrote = false;
  while (!wrote && rf::Clock::now() - t < 15s) {
    try {
      c.put("/m/after", "2");
      wrote = true;
    } catch (const EtcdUnavailable&) {
    }
  }
  CHECK(wrote);
  CHECK(c.get("/m/before")->value == "1");
  CHECK(c.get("/m/after")->value == "2");
  CHECK(c.endpoint() != cluster().url(0));
  EtcdClient only_dead({{cluster().url(0)}, 500ms});
  CHECK_THROWS_WITH_AS(only_dead.get("/m/before"), doctest::Contains("no endpoint answered"), EtcdUnavailable);
}

int main(int argc, char** argv) {
  const std::string why = testing::etcd_unavailable_reason();
  if (!why.empty()) {
    std::printf("SKIPPED: no etcd: %s\n", why.c_str());
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
