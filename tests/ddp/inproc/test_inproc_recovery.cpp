// The fault matrix's recovery scenarios in one process (tests/ddp/inproc/inproc_job.h): W = 3
// trainers as threads, the coordinator in memory on a simulated clock, a loopback data
// plane. Each scenario ends where the multi-process one does: the same W ends bitwise equal
// to the failure-free run; a shrink agrees on one digest; exact mode gives the failure-free
// digest through a shrink. Each costs only the failed worker: one death, at most one restart.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tests/ddp/inproc/inproc_job.h"

using namespace rf::ddp::inproc;

namespace {

JobOptions job(std::vector<std::string> faults, Restart restart = Restart::AtOnce, int micro_shards = 0,
               int world = 3) {
  JobOptions o;
  o.world = world;
  o.micro_shards = micro_shards;
  o.faults = std::move(faults);
  o.restart = restart;
  o.sync_step = 7;  // every fault below fires in step 8: all states are at step 7 then
  return o;
}

JobOutcome run(JobOptions o) {
  JobOutcome out = run_job(o);
  INFO("errors:\n", out.errors());
  INFO("event log:\n", out.event_log());
  REQUIRE_FALSE(out.timed_out);
  CHECK(out.errors().empty());
  CHECK(out.seconds < 1.0);  // tens of milliseconds on an idle core; the bound leaves room for a loaded CI
  return out;
}

// The failure-free run's digest (each configuration once).
std::string reference(int world, int micro_shards) {
  const JobOutcome out = run(job({}, Restart::AtOnce, micro_shards, world));
  const auto d = out.final_digests();
  REQUIRE(d.size() == static_cast<size_t>(world));
  REQUIRE(std::set<std::string>(d.begin(), d.end()).size() == 1);
  CHECK(out.recoveries.empty());
  return d.front();
}

int deaths(const JobOutcome& out) {
  return static_cast<int>(std::count_if(out.workers.begin(), out.workers.end(), [](const auto& w) { return w.died; }));
}

// Every worker that trained to the end holds `want`, and there are `world` of them.
void check_digests(const JobOutcome& out, const std::string& want, int world) {
  INFO("event log:\n", out.event_log());
  const auto d = out.final_digests();
  CHECK(d.size() == static_cast<size_t>(world));
  for (const auto& x : d) CHECK(x == want);
}

// One failure, recovered in place: one death, one restart, the failed slot blamed.
void check_one_failure(const JobOutcome& out, int slot, const std::string& cause) {
  CHECK(deaths(out) == 1);
  CHECK(out.restarts == 1);
  CHECK(out.recoveries.size() >= 1);
  const auto f = out.failures();
  INFO("failures: ", f.size());
  REQUIRE_FALSE(f.empty());
  CHECK(f.front() == std::to_string(slot) + ":" + cause);
}

}  // namespace

TEST_CASE("inproc: kill in the all-reduce of step 8, the slot restarted: bitwise the failure-free run") {
  const std::string want = reference(3, 0);
  const JobOutcome out = run(job({"kill:rank=1:step=8:phase=allreduce"}));
  check_one_failure(out, 1, "connection_closed");
  check_digests(out, want, 3);
}

TEST_CASE("inproc: hang in forward: evicted as hung on the simulated clock, restarted, bitwise") {
  const std::string want = reference(3, 0);
  const JobOutcome out = run(job({"hang:rank=2:step=8"}));
  check_one_failure(out, 2, "hung");
  check_digests(out, want, 3);
}

TEST_CASE("inproc: stop (no heartbeats): the lease expires, restarted, bitwise") {
  const std::string want = reference(3, 0);
  const JobOutcome out = run(job({"stop:rank=0:step=8"}));
  check_one_failure(out, 0, "lease_expired");
  check_digests(out, want, 3);
}

TEST_CASE("inproc: drop of rank 1's links in the all-reduce: recovered, bitwise") {
  const std::string want = reference(3, 0);
  const JobOutcome out = run(job({"drop:rank=1:step=8:phase=allreduce"}));
  CHECK(deaths(out) == 0);  // a drop costs no process: the worker recovers with the others
  CHECK(out.recoveries.size() >= 1);
  check_digests(out, want, 3);
}

TEST_CASE("inproc: shrink: a kill without restart, the survivors finish at W = 2 on one digest") {
  const JobOutcome out = run(job({"kill:rank=1:step=8:phase=allreduce"}, Restart::Never));
  CHECK(deaths(out) == 1);
  CHECK(out.restarts == 0);
  const auto d = out.final_digests();
  REQUIRE(d.size() == 2);
  CHECK(d[0] == d[1]);
  for (const auto& w : out.workers)
    if (!w.died) CHECK(w.result.world == 2);
}

TEST_CASE("inproc: fault during the transfer: the image's source killed while sending, bitwise") {
  const std::string want = reference(3, 0);
  // rank 1 dies at step 8; its replacement receives S_T, and the source dies while sending.
  const JobOutcome out = run(job({"kill:rank=1:step=8:phase=allreduce", "kill:rank=0:step=8:phase=transfer"}));
  INFO("event log:\n", out.event_log());
  CHECK(deaths(out) == 2);
  CHECK(out.restarts == 2);
  int rounds = 0;  // the second failure revokes the round of the first recovery: g+1 into g+2
  for (const auto& r : out.recoveries) rounds += r.rounds;
  CHECK(rounds >= 2);
  check_digests(out, want, 3);
}

TEST_CASE("inproc: exact mode through a shrink: the digest of the failure-free run at W = 3 and at W = 2") {
  const std::string want = reference(3, 6);
  CHECK(reference(2, 6) == want);
  const JobOutcome out = run(job({"kill:rank=2:step=8:phase=allreduce"}, Restart::Never, 6));
  check_digests(out, want, 2);
}

TEST_CASE("inproc: exact mode, shrink then grow back: the failure-free digest") {
  const std::string want = reference(3, 6);
  JobOptions o = job({"kill:rank=1:step=8:phase=allreduce"}, Restart::AfterShrink, 6);
  o.hold_step = 14;  // the survivors wait there for the replacement's join: the grow lands mid-job
  const JobOutcome out = run(o);
  CHECK(deaths(out) == 1);
  CHECK(out.restarts == 1);
  CHECK(out.recoveries.size() >= 2);  // the shrink, then the grow (a planned change)
  check_digests(out, want, 3);
}
