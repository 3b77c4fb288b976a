// A member whose training thread hangs while its heartbeat thread lives on — the failure
// users meet as "NCCL timeout" — at DEFAULT settings, on a simulated clock: the coordinator
// evicts it from its heartbeats' activity within its stall bound (D3, elastic/liveness.h),
// the round goes on without it, and every deadline counts from its own round's start.
// And a member whose GPU is stuck (a kernel on its stream never ends): its own report of
// kind gpu_stuck names it, and it is evicted in the same round whichever report comes first.
#include <doctest/doctest.h>

#include "elastic/membership.h"
#include "tests/elastic/membership_sim.h"

using namespace rf::elastic;
using namespace rf::elastic::test;
using namespace std::chrono_literals;

namespace {

MembershipOptions defaults(int w) {
  MembershipOptions o;  // heartbeat 100 ms, lease 1 s, join window 2 s, min world 30 s, ...
  o.target_world = w;
  o.min_world = w;
  return o;
}

// Generation 1 of 4 runs; slot `hung` stops inside step 325's compute at `hang_at`; the
// others wait for it inside the all-reduce. Heartbeats every 100 ms say so, until `until`
// or until the hung worker was evicted. Returns when the eviction happened (or `until`).
rf::TimePoint run_hung(Sim& s, int hung, rf::TimePoint hang_at, rf::TimePoint until) {
  while (s.now < until) {
    for (int slot = 0; slot < 4; ++slot) {
      const WorkerId w{slot, 0};
      if (slot == hung) s.beat_doing(w, 324, 1, Activity::Compute, s.now - hang_at + 3ms);
      else s.beat_doing(w, 324, 1, Activity::Wait, s.now - hang_at);
    }
    s.advance(100ms);
    if (s.count("evict") > 0) break;
  }
  return s.now;
}

}  // namespace

TEST_CASE("hang at defaults: the hung member is evicted within its bound, replaced, and the round closes") {
  Sim s(defaults(4));
  s.form(4);
  const rf::TimePoint hang_at = s.now;
  const rf::TimePoint evicted_at = run_hung(s, 0, hang_at, hang_at + 10s);
  REQUIRE(s.count("evict", "hung") == 1);
  CHECK(evicted_at - hang_at <= 1100ms);  // bound 1 s, one 100 ms tick
  const Transition& ev = s.last("evict");
  CHECK(ev.worker == WorkerId{0, 0});
  REQUIRE(ev.first_seen);
  CHECK(*ev.first_seen - hang_at <= 1s);
  CHECK(ev.detail.find("outside any collective") != std::string::npos);
  s.check_evicted_once("hung", WorkerId{0, 0});  // the launcher SIGKILLs it
  CHECK(s.last("revoke").cause == "hung");
  CHECK(s.m.generation() == 2);
  // The survivors answer the revocation; nobody waits for the evicted worker.
  for (int slot = 1; slot < 4; ++slot) REQUIRE(s.report({slot, 0}, 2, 324, "d").ok());
  s.run_for(400ms, {{1, 0}, {2, 0}, {3, 0}}, 324);
  CHECK(s.m.phase() == Phase::Recovering);
  CHECK_FALSE(s.m.plan());  // the window is open for the replacement
  s.join_new({0, 1});       // the launcher restarted the slot
  REQUIRE(s.m.plan());
  CHECK(s.m.plan()->world() == 4);
  CHECK(s.m.plan()->target_step == 324);
  CHECK(s.m.plan()->find(0)->worker == WorkerId{0, 1});
  CHECK(s.m.plan()->find(0)->source_rank.has_value());
  s.ready_all();
  CHECK(s.m.phase() == Phase::Running);
  CHECK(s.m.recoveries().back().cause == Cause::Hung);
  CHECK(s.count("stop") == 0);
}

TEST_CASE("hang at defaults, any rank: the last rank, and a hang inside recovery") {
  Sim s(defaults(4));
  s.form(4);
  run_hung(s, 3, s.now, s.now + 10s);
  REQUIRE(s.count("evict", "hung") == 1);
  CHECK(s.last("evict").worker == WorkerId{3, 0});
  for (int slot = 0; slot < 3; ++slot) REQUIRE(s.report({slot, 0}, 2, 324, "d").ok());
  s.join_new({3, 1});
  REQUIRE(s.m.plan());
  // Slot 1 hangs in the recovery's own work (its transfer): judged the same way, against
  // the recovery bound its heartbeats carry; the round is revoked into the next one.
  const rf::TimePoint stuck = s.now;
  for (int i = 0; i < 20 && s.count("evict", "hung") < 2; ++i) {
    s.m.heartbeat({1, 0}, 1, 324, s.now, Activity{Activity::Compute, s.now - stuck, {}, 1500ms, "recovery"});
    s.beat({{0, 0}, {2, 0}, {3, 1}}, 324, 2);
    s.advance(100ms);
  }
  REQUIRE(s.count("evict", "hung") == 2);
  CHECK(s.last("evict").worker == WorkerId{1, 0});
  CHECK(s.now - stuck <= 1600ms);
  CHECK(s.m.generation() == 3);
  CHECK(s.m.recoveries().size() == 1);  // one episode, two rounds
  CHECK(s.m.recoveries().back().rounds == 2);
}

TEST_CASE("hang plus a second failure during its recovery: both are replaced, the job does not stop") {
  Sim s(defaults(4));
  s.form(4);
  run_hung(s, 0, s.now, s.now + 10s);
  REQUIRE(s.count("evict", "hung") == 1);
  for (int slot = 1; slot < 4; ++slot) REQUIRE(s.report({slot, 0}, 2, 324, "d").ok());
  s.lose({3, 0});  // a second worker dies during the round: g2 -> g3
  CHECK(s.m.generation() == 3);
  for (int slot = 1; slot < 3; ++slot) REQUIRE(s.report({slot, 0}, 3, 324, "d").ok());
  s.run_for(1500ms, {{1, 0}, {2, 0}}, 324);  // the replacements take their time to start
  s.join_new({0, 1});
  s.join_new({3, 1});
  REQUIRE(s.m.plan());
  CHECK(s.m.plan()->world() == 4);
  CHECK(s.count("stop") == 0);
}

TEST_CASE("the min-world deadline counts from the round's own start, not from the first failure") {
  // A member that renews its lease but reports no activity (and no state) is evicted only
  // by report_timeout (30 s); the round that eviction opens must get its whole window and
  // minimum-world wait, or the job would stop ("fewer than the minimum world size 4, after
  // waiting 32 s") before the replacement can start.
  Sim s(defaults(4));
  s.form(4);
  REQUIRE(s.m.failure_report({1, 0}, 1, 324, 0, "D3 stall waiting on rank 0", s.now).ok());
  s.drain();
  const rf::TimePoint revoked = s.now;
  for (int slot = 1; slot < 4; ++slot) REQUIRE(s.report({slot, 0}, 2, 324, "d").ok());
  const std::vector<WorkerId> all{{0, 0}, {1, 0}, {2, 0}, {3, 0}};
  while (s.count("evict") == 0 && s.now < revoked + 40s) s.run_for(100ms, all, 324);
  REQUIRE(s.count("evict", "report_timeout") == 1);
  CHECK(s.now - revoked <= 30100ms);
  for (int slot = 1; slot < 4; ++slot) REQUIRE(s.report({slot, 0}, 3, 324, "d").ok());
  s.run_for(3s, {{1, 0}, {2, 0}, {3, 0}}, 324);  // past the first failure + window + min-world wait
  CHECK(s.count("stop") == 0);
  CHECK(s.m.phase() == Phase::Recovering);
  s.join_new({0, 1});
  REQUIRE(s.m.plan());
  CHECK(s.m.plan()->world() == 4);
}

TEST_CASE("no false eviction: slow compute within the bound, waits up to two bounds, idle and standby workers") {
  Sim s(defaults(2));
  s.form(2);
  s.join_new({2, 0});  // a spare, standing by
  // Slot 0 computes for 950 ms of a 1 s bound (a step 10x slower than usual), slot 1 waits
  // for it inside the all-reduce; heartbeats every 50 ms say how long each has been at it.
  const rf::TimePoint began = s.now;
  while (s.now - began < 950ms) {
    s.beat_doing({0, 0}, 10, 1, Activity::Compute, s.now - began);
    s.beat_doing({1, 0}, 10, 1, Activity::Wait, s.now - began);
    s.beat_doing({2, 0}, -1, 0, Activity::Compute, 10s);  // not counted on: never judged
    s.advance(50ms);
  }
  // Slot 0 finished its compute and waits too; slot 1 goes on waiting, up to 2 bounds.
  const rf::TimePoint done = s.now;
  while (s.now - began < 2s) {
    s.beat_doing({0, 0}, 11, 1, Activity::Wait, s.now - done);
    s.beat_doing({1, 0}, 10, 1, Activity::Wait, s.now - began);
    s.beat({{2, 0}}, -1, 0);
    s.advance(50ms);
  }
  CHECK(s.count("evict") == 0);
  CHECK(s.count("revoke") == 0);
  // Past two bounds inside one collective: its communicator is stuck (wedged).
  for (int i = 0; i < 3 && s.count("evict") == 0; ++i) {
    s.beat_doing({0, 0}, 11, 1, Activity::Wait, s.now - done);
    s.beat_doing({1, 0}, 10, 1, Activity::Wait, s.now - began);
    s.beat({{2, 0}}, -1, 0);
    s.advance(50ms);
  }
  CHECK(s.count("evict", "wedged") == 1);
  CHECK(s.last("evict").worker == WorkerId{1, 0});
}

// --- a stuck GPU (FailureKind::gpu_stuck) ------------------------------------------------

namespace {
StateReport holding(int64_t step, uint64_t comm_generation) {
  StateReport r{true, step, "d"};
  r.comm_generation = comm_generation;
  return r;
}
// The only recovery: one round, finished, for a stuck GPU named `culprit`.
void check_one_round(const Sim& s, WorkerId culprit) {
  REQUIRE(s.m.recoveries().size() == 1);
  const RecoveryRecord& rec = s.m.recoveries()[0];
  CHECK(rec.rounds == 1);
  CHECK(rec.finished);
  CHECK(rec.cause == Cause::GpuStuck);
  CHECK(rec.worker == culprit);
}
}  // namespace

TEST_CASE("gpu_stuck first: the reporter is evicted, the round excludes it, one round") {
  Sim s(2);
  s.form(2);
  auto a = s.m.failure_report({1, 0}, 1, 5, 1, "start event never completed", s.now, FailureKind::gpu_stuck);
  s.drain();
  CHECK(a.ok());
  s.check_evicted_once("gpu_stuck", WorkerId{1, 0});  // the launcher SIGKILLs it
  CHECK(s.last("evict").generation == 1);
  CHECK(s.last("revoke").cause == "gpu_stuck");
  CHECK(s.last("revoke").worker == WorkerId{1, 0});
  CHECK(s.m.generation() == 2);
  // The peer's own report (it waited in the collective, naming nobody) comes late: stale.
  CHECK(s.m.failure_report({0, 0}, 1, 5, std::nullopt, "stall", s.now).kind == Answer::Stale);
  CHECK(s.m.generation() == 2);
  // The round expects only the peer; the replacement fills the hole at once (W reached).
  REQUIRE(s.m.report({0, 0}, 2, holding(5, 1), s.now).ok());
  CHECK_FALSE(s.m.plan());
  s.join_new({1, 1});
  REQUIRE(s.m.plan());
  CHECK(slots_of(*s.m.plan()) == std::vector<int>{0, 1});
  CHECK(s.m.plan()->ranks[1].worker == WorkerId{1, 1});
  CHECK(s.m.plan()->shrink_from == 0u);  // a replacement joins: afresh
  s.ready_all();
  CHECK(s.m.phase() == Phase::Running);
  check_one_round(s, {1, 0});
}

TEST_CASE("the peers' reports first: the stuck member's late gpu_stuck evicts it without a second round") {
  Sim s(3);
  s.form(3);
  // Both peers waited in the collective: their reports name nobody and open round 2, which
  // expects the stuck member too.
  REQUIRE(s.m.failure_report({0, 0}, 1, 5, std::nullopt, "stall", s.now).ok());
  REQUIRE(s.m.failure_report({2, 0}, 1, 5, std::nullopt, "stall", s.now).kind == Answer::Stale);  // already
  s.drain();
  REQUIRE(s.m.generation() == 2);
  REQUIRE(s.count("revoke") == 1);
  REQUIRE(s.m.report({0, 0}, 2, holding(5, 1), s.now).ok());
  REQUIRE(s.m.report({2, 0}, 2, holding(5, 1), s.now).ok());
  s.run_for(2100ms, {{0, 0}, {1, 0}, {2, 0}}, 5);  // past the window: waits for slot 1 only
  REQUIRE_FALSE(s.m.plan());
  // The stuck member's report of generation 1 (stale before gpu_stuck existed).
  auto a = s.m.failure_report({1, 0}, 1, 5, 1, "aborted; start event never completed", s.now,
                              FailureKind::gpu_stuck);
  s.drain();
  CHECK(a.ok());
  s.check_evicted_once("gpu_stuck", WorkerId{1, 0});
  CHECK(s.last("evict").generation == 2);
  CHECK(s.count("revoke") == 1);  // not revoked again
  CHECK(s.count("stale") == 1);   // only the second peer's
  CHECK(s.m.generation() == 2);
  // Nothing else held the round: it closes now, the survivors in their order, shrinking 1.
  REQUIRE(s.m.plan());
  CHECK(slots_of(*s.m.plan()) == std::vector<int>{0, 2});
  CHECK(s.m.plan()->generation == 2u);
  CHECK(s.m.plan()->shrink_from == 1u);
  CHECK(s.last("plan").detail.find("shrinks generation 1") != std::string::npos);
  s.ready_all();
  CHECK(s.m.phase() == Phase::Running);
  CHECK(s.m.members() == std::vector<WorkerId>{{0, 0}, {2, 0}});
  check_one_round(s, {1, 0});
}

TEST_CASE("the peers' report first, the window still open: the round goes on and takes the replacement") {
  Sim s(2);
  s.form(2);
  REQUIRE(s.m.failure_report({0, 0}, 1, 5, std::nullopt, "stall", s.now).ok());
  REQUIRE(s.m.report({0, 0}, 2, holding(5, 1), s.now).ok());
  REQUIRE(s.m.failure_report({1, 0}, 1, 5, 1, "stuck", s.now, FailureKind::gpu_stuck).ok());
  s.drain();
  s.check_evicted_once("gpu_stuck", WorkerId{1, 0});
  CHECK_FALSE(s.m.plan());  // one of W reported, the window is open
  s.join_new({1, 1});
  REQUIRE(s.m.plan());
  CHECK(s.m.plan()->ranks[1].worker == WorkerId{1, 1});
  CHECK(s.m.plan()->shrink_from == 0u);
  s.ready_all();
  CHECK(s.m.generation() == 2);
  check_one_round(s, {1, 0});
}

TEST_CASE("gpu_stuck of an older generation from a member the round's plan places: revoked again") {
  Sim s(2);
  s.form(2);
  REQUIRE(s.m.failure_report({0, 0}, 1, 5, std::nullopt, "stall", s.now).ok());
  REQUIRE(s.m.report({0, 0}, 2, holding(5, 1), s.now).ok());
  REQUIRE(s.m.report({1, 0}, 2, holding(5, 1), s.now).ok());
  REQUIRE(s.m.plan());
  REQUIRE(s.m.failure_report({1, 0}, 1, 5, 1, "stuck", s.now, FailureKind::gpu_stuck).ok());
  s.drain();
  s.check_evicted_once("gpu_stuck", WorkerId{1, 0});
  CHECK(s.m.generation() == 3);
  CHECK(s.last("revoke").cause == "gpu_stuck");
  REQUIRE(s.m.recoveries().size() == 1);
  CHECK(s.m.recoveries()[0].rounds == 2);
  // A gpu_stuck report from a worker nobody counts on (not expected, not placed) is stale.
  s.join_new({5, 0});
  CHECK(s.m.failure_report({5, 0}, 2, -1, 5, "stuck", s.now, FailureKind::gpu_stuck).kind == Answer::Stale);
  CHECK(s.count("evict", "gpu_stuck") == 1);
}
