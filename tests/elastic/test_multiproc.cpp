// Multi-process tests with tiny test workers (elastic_test_worker) against an in-process
// coordinator: D1 (SIGKILL -> revoked within 100 ms, read off the event log), D2 (SIGSTOP
// -> revoked after about one lease), a replacement within the join window keeps W, no
// replacement -> shrink, a joiner while RUNNING -> planned reconfiguration, wrong token.
#include <doctest/doctest.h>

#include <memory>

#include "base/str.h"
#include "elastic/admin_client.h"
#include "elastic/coordinator.h"
#include "elastic/token.h"
#include "tests/elastic/proc.h"

using namespace rf::elastic;
using namespace rf::test;
using namespace std::chrono_literals;

namespace {

struct Job {
  std::string dir, log, token = random_token();
  std::unique_ptr<Coordinator> coord;
  std::map<std::pair<int, int64_t>, Proc> procs;

  Job(const std::string& name, int world, rf::Duration hb, rf::Duration lease, rf::Duration window) {
    dir = temp_dir(name);
    log = dir + "/events.jsonl";
    CoordinatorOptions o;
    o.token = token;
    o.event_log = log;
    o.membership.target_world = world;
    o.membership.min_world = 1;
    o.membership.heartbeat = hb;
    o.membership.lease = lease;
    o.membership.join_window = window;
    coord = std::make_unique<Coordinator>(o);
    coord->start();
  }
  ~Job() {
    procs.clear();  // kill and reap every child before the coordinator goes
    coord.reset();
    TempDirGuard{dir};
  }
  Proc& start(int slot, int64_t inc = 0, const std::string& token_override = "") {
    auto key = std::make_pair(slot, inc);
    procs[key] = Proc({RF_TEST_WORKER, "--steps", "100000", "--step-ms", "5"},
                      {{"RINGFENCE_COORD", "127.0.0.1:" + std::to_string(coord->port())},
                       {"RINGFENCE_TOKEN", token_override.empty() ? token : token_override},
                       {"RINGFENCE_SLOT", std::to_string(slot)},
                       {"RINGFENCE_INCARNATION", std::to_string(inc)},
                       {"RINGFENCE_INJECT", ""}},
                      rf::str(dir, "/worker", slot, ".", inc, ".log"));
    return procs[key];
  }
  json event(const std::function<bool(const json&)>& pred, rf::Duration timeout = 10s) {
    auto e = wait_event(log, pred, timeout);
    REQUIRE_MESSAGE(e.has_value(), "event not seen; log:\n", slurp(log));
    return *e;
  }
  // Generation g runs and its members have made progress.
  void wait_steps(uint64_t g, int64_t min_step) {
    AdminClient admin("127.0.0.1", coord->port(), token);
    const auto deadline = rf::Clock::now() + capped(10s);
    while (rf::Clock::now() < deadline) {
      auto st = admin.status();
      if (st.phase == Phase::Running && st.generation == g && st.step >= min_step) return;
      ::poll(nullptr, 0, 5);
    }
    FAIL("generation ", g, " never reached step ", min_step, "; log:\n", slurp(log));
  }
};

double ms_between(int64_t from_us, int64_t to_us) { return (to_us - from_us) / 1000.0; }

// Three workers run generation 1 and make progress; then `sig` goes to slot `victim`.
// Returns the revocation of generation 1 (the "revoke" event of generation 2) and the
// wall time the signal was sent (only for ordering: the failure precedes its detection).
struct Revoked {
  json event;
  int64_t signalled_us;
};
Revoked signal_and_wait_revoke(Job& job, int victim, int sig) {
  for (int s = 0; s < 3; ++s) job.start(s);
  job.event(is_event("running", 1));
  job.wait_steps(1, 5);
  const int64_t signalled_us = rf::wall_us();
  job.procs.at({victim, 0}).signal(sig);
  return {job.event(is_event("revoke", 2)), signalled_us};
}

}  // namespace

// Detection latencies are read off the coordinator's event log (when the failure could
// first be seen -> revoked: since_failure_ms), never off this test's clock, which ctest -j
// and a loaded machine stretch arbitrarily. The cause tells which detector fired, so a
// broken D1 cannot hide behind D2 (it would show up as lease_expired, one lease later).
TEST_CASE("D1: SIGKILL of a worker -> revoked within 100 ms") {
  Job job("d1", 3, 50ms, 1s, 2s);
  auto [revoke, killed_us] = signal_and_wait_revoke(job, 1, SIGKILL);
  const double latency = revoke["since_failure_ms"].get<double>();
  MESSAGE("D1: connection closed -> revoke in ", latency, " ms (cause ", revoke["cause"].get<std::string>(), ")");
  CHECK(revoke["cause"] == "connection_closed");
  CHECK(revoke["worker"]["slot"] == 1);
  CHECK(revoke["first_seen_us"].get<int64_t>() >= killed_us);  // nothing seen before the kill
  CHECK(latency >= 0.0);
  CHECK(latency < 100.0);
}

TEST_CASE("D2: SIGSTOP of a worker -> revoked after about one lease") {
  Job job("d2", 3, 50ms, 500ms, 2s);
  auto [revoke, stopped_us] = signal_and_wait_revoke(job, 2, SIGSTOP);
  // For a lease expiry the failure is first visible at the first missed heartbeat, one
  // heartbeat after the last renewal; so last renewal -> revoke = since_failure + heartbeat.
  const double since_renewal = revoke["since_failure_ms"].get<double>() + 50.0;
  MESSAGE("D2: last renewal -> revoke in ", since_renewal, " ms (lease 500 ms, heartbeat 50 ms)");
  CHECK(revoke["cause"] == "lease_expired");
  CHECK(revoke["worker"]["slot"] == 2);
  CHECK(revoke["ts_us"].get<int64_t>() >= stopped_us);
  // About one lease: never before it expires, at most half a lease late.
  CHECK(since_renewal >= 0.8 * 500.0);
  CHECK(since_renewal <= 1.5 * 500.0);
}

TEST_CASE("a replacement joining within the join window keeps W and the rank") {
  Job job("replace", 3, 50ms, 1s, 3s);
  json revoke = signal_and_wait_revoke(job, 1, SIGKILL).event;
  job.start(1, 1);  // what the launcher does: same slot, next incarnation
  json running = job.event(is_event("running", 2));
  CHECK(running["detail"] == "world 3");
  // The round closed as soon as W was reached, well before the 3 s window.
  CHECK(ms_between(revoke["ts_us"], running["ts_us"]) < 2500.0);
  AdminClient admin("127.0.0.1", job.coord->port(), job.token);
  auto st = admin.status();
  REQUIRE(st.members.size() == 3);
  CHECK(st.members[1].slot == 1);
  CHECK(st.members[1].incarnation == 1);
}

TEST_CASE("no replacement -> shrink after the join window; a later joiner -> planned grow") {
  Job job("shrink", 3, 50ms, 1s, 500ms);
  json revoke = signal_and_wait_revoke(job, 1, SIGKILL).event;
  json plan = job.event(is_event("plan", 2));
  json running = job.event(is_event("running", 2));
  CHECK(running["detail"] == "world 2");
  CHECK(ms_between(revoke["ts_us"], plan["ts_us"]) >= 500.0 - 1.0);  // waited for the window
  job.wait_steps(2, 20);
  // The slot comes back while generation 2 runs: R5 reconfigure, planned round, W again.
  job.start(1, 1);
  job.event(is_event("reconfigure_requested", 2));
  json planned = job.event(is_event("revoke", 3));
  CHECK(planned["cause"] == "reconfigure");
  json grown = job.event(is_event("running", 3));
  CHECK(grown["detail"] == "world 3");
  AdminClient admin("127.0.0.1", job.coord->port(), job.token);
  auto sum = admin.summary().raw;
  REQUIRE(sum["recoveries"].size() == 2);
  CHECK(sum["recoveries"][1]["planned"] == true);
}

TEST_CASE("a worker with the wrong token is refused") {
  Job job("token", 1, 50ms, 1s, 500ms);
  Proc& p = job.start(0, 0, "0123456789abcdef0123456789abcdef");
  auto st = p.wait(10s);
  REQUIRE(st.has_value());
  CHECK(*st != 0);
  CHECK(slurp(job.dir + "/worker0.0.log").find("wrong job token") != std::string::npos);
  // The worker refuses the coordinator first (its proof does not match the wrong token) and
  // hangs up: the coordinator logs the unanswered challenge.
  job.event(is_event("refused", -1, "challenge_unanswered"));
}
