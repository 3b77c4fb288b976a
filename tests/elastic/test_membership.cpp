// The generation state machine, driven with an injected clock: every transition of
// docs/protocol.md (forming, D1, D2, rounds, join window, minimum world size, digest mismatch,
// g+1 revoked into g+2, stale messages, planned grow and stop).
#include <doctest/doctest.h>

#include <algorithm>

#include "base/error.h"
#include "elastic/membership.h"
#include "tests/elastic/membership_sim.h"

using namespace rf::elastic;
using namespace std::chrono_literals;

using namespace rf::elastic::test;

TEST_CASE("forming: generation 1 forms when all W have reported, ranks by slot") {
  Sim s(3);
  CHECK(s.m.phase() == Phase::Forming);
  CHECK(s.m.generation() == 1);
  s.join({2, 0});
  s.join({0, 0});
  s.join({1, 0});
  s.report({2, 0}, 0, -1, "init");
  s.report({0, 0}, 0, -1, "init");
  CHECK_FALSE(s.m.plan());  // 2 of 3, window not passed
  s.report({1, 0}, 0, -1, "init");
  REQUIRE(s.m.plan());
  CHECK(slots_of(*s.m.plan()) == std::vector<int>{0, 1, 2});
  CHECK(s.m.plan()->target_step == -1);
  for (auto& r : s.m.plan()->ranks) CHECK_FALSE(r.source_rank);
  CHECK(s.m.plan_for({0, 0}, 0).kind == PlanQuery::Ready);
  // Not running until every rank is ready (step 7).
  s.m.ready({0, 0}, 1, s.now);
  s.m.ready({1, 0}, 1, s.now);
  CHECK(s.m.phase() == Phase::Forming);
  CHECK(s.m.ready_state({0, 0}, 1).kind == ReadyQuery::Pending);
  s.m.ready({2, 0}, 1, s.now);
  s.drain();
  CHECK(s.m.phase() == Phase::Running);
  CHECK(s.m.ready_state({0, 0}, 1).kind == ReadyQuery::Running);
  CHECK(s.m.members().size() == 3);
  CHECK(s.count("running") == 1);
  CHECK(s.m.recoveries().empty());  // forming is not a recovery
}

TEST_CASE("forming: spares (slots >= W) do not complete the first round; primaries get rank == slot") {
  Sim s(2);
  s.join({2, 0});  // a spare, first to report
  s.report({2, 0}, 0, -1, "init");
  s.join({0, 0});
  s.report({0, 0}, 0, -1, "init");
  CHECK_FALSE(s.m.plan());
  s.join({1, 0});
  s.report({1, 0}, 0, -1, "init");
  REQUIRE(s.m.plan());
  CHECK(slots_of(*s.m.plan()) == std::vector<int>{0, 1});
  CHECK(s.m.plan_for({2, 0}, 0).kind == PlanQuery::Pending);  // standby
}

TEST_CASE("forming: after the form timeout it starts with at least min_world, else stops") {
  SUBCASE("enough") {
    Sim s(3, 2);
    s.join({0, 0});
    s.join({1, 0});
    s.report({0, 0}, 0, -1, "init");
    s.report({1, 0}, 0, -1, "init");
    s.beat_for_ticks(99, {{0, 0}, {1, 0}}, -1, 0);  // 9.9 s of heartbeats
    CHECK_FALSE(s.m.plan());
    s.beat({{0, 0}, {1, 0}}, -1, 0);
    s.advance(100ms);
    REQUIRE(s.m.plan());
    CHECK(s.m.plan()->world() == 2);
  }
  SUBCASE("too few") {
    Sim s(3, 2);
    s.join({0, 0});
    s.report({0, 0}, 0, -1, "init");
    for (int i = 0; i < 160 && s.m.phase() != Phase::Stopped; ++i) {
      s.beat({{0, 0}}, -1, 0);
      s.advance(100ms);
    }
    CHECK(s.m.phase() == Phase::Stopped);
    CHECK(s.m.error().find("minimum world size 2") != std::string::npos);
    CHECK(s.count("stop", "below_min_world") == 1);
    CHECK(s.m.join({5, 0}, s.now).kind == Answer::Stopped);
  }
}

TEST_CASE("D1: a member's connection closing revokes g at once") {
  Sim s(3);
  auto ws = s.form(3);
  s.beat(ws, 10, 1);
  s.advance(50ms);
  s.lose({1, 0});
  CHECK(s.m.phase() == Phase::Recovering);
  CHECK(s.m.generation() == 2);
  const Transition& r = s.last("revoke");
  CHECK(r.cause == "connection_closed");
  CHECK(r.worker == WorkerId{1, 0});
  CHECK(r.generation == 2);
  CHECK(r.step == 10);
  REQUIRE(r.first_seen);
  CHECK(*r.first_seen == s.now);
  // Survivors learn it in their next heartbeat reply.
  auto h = s.m.heartbeat({0, 0}, 1, 10, s.now);
  CHECK(h.generation == 2);
  CHECK(h.phase == Phase::Recovering);
  CHECK_FALSE(h.fenced);
  CHECK_FALSE(h.planned);
  CHECK(h.cause == Cause::ConnectionClosed);
  // The dead worker is fenced if it ever speaks again.
  CHECK(s.m.heartbeat({1, 0}, 1, 10, s.now).fenced);
  // The launcher's exit report for the same death does not revoke twice.
  s.m.process_exited({1, 0}, 9, s.now, s.now);
  s.drain();
  CHECK(s.m.generation() == 2);
  CHECK(s.count("revoke") == 1);
}

TEST_CASE("D1 by the launcher: process exit revokes with the time since the exit") {
  Sim s(2);
  s.form(2);
  const auto exited_at = s.now;
  s.now += 30ms;
  s.m.process_exited({0, 0}, 137, exited_at, s.now);
  s.drain();
  const Transition& r = s.last("revoke");
  CHECK(r.cause == "process_exited");
  CHECK(s.now - *r.first_seen == 30ms);
}

TEST_CASE("D2: a worker that stops heartbeating is evicted after one lease") {
  Sim s(3);
  s.form(3);
  rf::TimePoint last_beat_1 = s.now;
  for (int i = 0; i < 9; ++i) {
    s.beat({{0, 0}, {1, 0}, {2, 0}}, 5, 1);
    last_beat_1 = s.now;
    s.advance(100ms);
  }
  // From here slot 1 is silent (SIGSTOP): nothing happens before its lease runs out.
  int ticks = 0;
  while (s.m.generation() == 1 && ticks < 100) {
    s.beat({{0, 0}, {2, 0}}, 5, 1);
    s.advance(10ms);
    ++ticks;
  }
  CHECK(s.m.generation() == 2);
  const auto waited = s.now - last_beat_1;
  CHECK(waited >= 1s);
  CHECK(waited <= 1s + 20ms);
  const Transition& r = s.last("revoke");
  CHECK(r.cause == "lease_expired");
  CHECK(r.worker == WorkerId{1, 0});
  REQUIRE(r.first_seen);
  CHECK(*r.first_seen == last_beat_1 + 100ms);  // the first heartbeat that did not come
  s.check_evicted_once("lease_expired", WorkerId{1, 0});
}

TEST_CASE("recovery: a replacement joining within the join window keeps W and the rank") {
  Sim s(3);
  s.form(3);
  s.lose({1, 0});
  REQUIRE(s.m.generation() == 2);
  // Survivors report: slot 0 applied step 10, slot 2 was one behind (R2).
  CHECK(s.report({0, 0}, 2, 10, "d10").ok());
  CHECK(s.report({2, 0}, 2, 9, "d9").ok());
  s.advance(300ms);
  CHECK_FALSE(s.m.plan());  // W not reached, window open
  s.join({1, 1});           // restarted by the launcher
  CHECK(s.report_new({1, 1}).ok());
  REQUIRE(s.m.plan());
  const Plan p = *s.m.plan();
  CHECK(p.generation == 2);
  CHECK(p.target_step == 10);
  CHECK(p.target_digest == "d10");
  CHECK_FALSE(p.whole_job_restart);  // survivors hold state
  CHECK(slots_of(p) == std::vector<int>{0, 1, 2});
  CHECK(p.ranks[1].worker == WorkerId{1, 1});
  CHECK_FALSE(p.ranks[0].source_rank);
  CHECK(p.ranks[1].source_rank == 0);
  CHECK(p.ranks[2].source_rank == 0);
  s.ready_all();
  CHECK(s.m.phase() == Phase::Running);
  CHECK(s.m.generation() == 2);
  REQUIRE(s.m.recoveries().size() == 1);
  const auto& rec = s.m.recoveries()[0];
  CHECK(rec.finished);
  CHECK(rec.cause == Cause::ConnectionClosed);
  CHECK(rec.world == 3);
  CHECK(rec.rounds == 1);
  CHECK(rec.target_step == 10);
  CHECK_FALSE(rec.whole_job_restart);
}

TEST_CASE("whole-job failure: a fresh start after a generation ran is a whole-job restart; every plan names the job") {
  Sim s(2);
  s.opt.job_id = "job-7";
  Membership m(s.opt, s.now);  // (the Sim's own Membership has no job id)
  auto drain = [&] { return m.take_transitions(); };
  for (int slot : {0, 1}) {
    REQUIRE(m.join({slot, 0}, s.now).ok());
    REQUIRE(m.report({slot, 0}, 0, StateReport{}, s.now).ok());
  }
  REQUIRE(m.plan());
  CHECK(m.plan()->fresh_start);
  CHECK_FALSE(m.plan()->whole_job_restart);  // the job's first generation
  CHECK(m.plan()->job_id == "job-7");
  for (const auto& r : m.plan()->ranks) REQUIRE(m.ready(r.worker, 1, s.now).ok());
  REQUIRE(m.phase() == Phase::Running);
  drain();
  // Every worker dies; their restarts hold nothing.
  m.connection_lost({0, 0}, s.now);
  m.connection_lost({1, 0}, s.now);
  const uint64_t g = m.generation();  // (the second loss revoked the round the first opened)
  REQUIRE(g >= 2);
  for (int slot : {0, 1}) {
    REQUIRE(m.join({slot, 1}, s.now).ok());
    REQUIRE(m.report({slot, 1}, g, StateReport{}, s.now).ok());
  }
  REQUIRE(m.plan());
  CHECK(m.plan()->fresh_start);
  CHECK(m.plan()->whole_job_restart);
  CHECK(m.plan()->job_id == "job-7");
  bool said = false;
  for (const auto& t : drain())
    if (t.event == TransitionEvent::Plan) said = t.detail.find("whole-job restart") != std::string::npos;
  CHECK(said);
  // A worker restored the job's checkpoint of step 19 and revokes the generation; the next
  // round plans from what everyone reports (the other found no file: it receives S_T).
  REQUIRE(m.failure_report({0, 1}, g, 19, std::nullopt, "restored step 19 from disk", s.now).ok());
  REQUIRE(m.generation() == g + 1);
  REQUIRE(m.report({0, 1}, g + 1, StateReport{true, 19, "d19"}, s.now).ok());
  REQUIRE(m.report({1, 1}, g + 1, StateReport{}, s.now).ok());
  REQUIRE(m.plan());
  CHECK_FALSE(m.plan()->fresh_start);
  CHECK_FALSE(m.plan()->whole_job_restart);
  CHECK(m.plan()->target_step == 19);
  CHECK(m.plan()->ranks[1].source_rank == 0);
  for (const auto& r : m.plan()->ranks) REQUIRE(m.ready(r.worker, g + 1, s.now).ok());
  CHECK(m.phase() == Phase::Running);
  REQUIRE(m.recoveries().size() == 1);  // one episode, from the first loss to RUNNING again
  CHECK(m.recoveries()[0].whole_job_restart);
  CHECK(m.recoveries()[0].finished);
  CHECK(m.recoveries()[0].target_step == 19);
}

TEST_CASE("recovery: no replacement -> the group shrinks after the join window, order kept") {
  Sim s(3);
  s.fail_one(3, 1, 4, "x");
  s.beat_for_ticks(19, {{0, 0}, {2, 0}}, 4, 1);
  CHECK_FALSE(s.m.plan());
  s.beat({{0, 0}, {2, 0}}, 4, 1);
  s.advance(100ms);  // 2 s: the join window has passed
  REQUIRE(s.m.plan());
  CHECK(slots_of(*s.m.plan()) == std::vector<int>{0, 2});
  for (auto& r : s.m.plan()->ranks) CHECK_FALSE(r.source_rank);
  s.ready_all();
  CHECK(s.m.members().size() == 2);
}

TEST_CASE("recovery: the round waits for every live member of g before closing") {
  Sim s(3);
  s.form(3);
  s.lose({2, 0});
  s.report({0, 0}, 2, 4, "x");
  s.join_new({2, 1});
  CHECK_FALSE(s.m.plan());  // W reached, but slot 1 (alive) has not reported
  s.report({1, 0}, 2, 4, "x");
  CHECK(s.m.plan());
}

TEST_CASE("a failure during recovery revokes g+1 into g+2; old reports are stale") {
  Sim s(3);
  s.fail_one(3, 2, 7, "a");
  SUBCASE("before the plan") {
    s.m.connection_lost({1, 0}, s.now);
    s.drain();
    CHECK(s.m.generation() == 3);
    CHECK(s.m.phase() == Phase::Recovering);
    CHECK(s.m.plan_for({0, 0}, 2).kind == PlanQuery::Revoked);
    // A report for the revoked round is stale and ignored (and logged).
    CHECK(s.report({0, 0}, 2, 7, "a").kind == Answer::Stale);
    CHECK(s.count("stale", "report") == 1);
    CHECK(s.report({0, 0}, 3, 7, "a").ok());
    s.run_for(2100ms, {{0, 0}}, 7);
    REQUIRE(s.m.plan());
    CHECK(s.m.plan()->generation == 3);
    CHECK(slots_of(*s.m.plan()) == std::vector<int>{0});
  }
  SUBCASE("after the plan, before ready") {
    s.join_new({2, 1});
    REQUIRE(s.m.plan());
    s.m.ready({0, 0}, 2, s.now);
    s.advance(10ms);
    s.m.connection_lost({2, 1}, s.now);  // the replacement dies during transfer
    s.drain();
    CHECK(s.m.generation() == 3);
    CHECK_FALSE(s.m.plan());
    CHECK(s.m.ready_state({0, 0}, 2).kind == ReadyQuery::Revoked);
    CHECK(s.m.ready({0, 0}, 2, s.now).kind == Answer::Stale);  // stale ready
    s.report({0, 0}, 3, 7, "a");
    s.report({1, 0}, 3, 7, "a");
    s.join_new({2, 2});
    REQUIRE(s.m.plan());
    s.ready_all();
    CHECK(s.m.phase() == Phase::Running);
    CHECK(s.m.generation() == 3);
    REQUIRE(s.m.recoveries().size() == 1);
    CHECK(s.m.recoveries()[0].rounds == 2);
    CHECK(s.m.recoveries()[0].from_generation == 1);
    CHECK(s.m.recoveries()[0].generation == 3);
  }
}

TEST_CASE("a digest mismatch at T stops the job with an error naming workers and digests") {
  Sim s(3);
  s.form(3);
  s.lose({0, 0});
  s.report({1, 0}, 2, 12, "aaaa");
  s.report({2, 0}, 2, 12, "bbbb");
  s.join_new({0, 1});
  CHECK(s.m.phase() == Phase::Stopped);
  const std::string e = s.m.error();
  CHECK(e.find("digest mismatch at step 12") != std::string::npos);
  CHECK(e.find("slot 1 incarnation 0 digest 'aaaa'") != std::string::npos);
  CHECK(e.find("slot 2 incarnation 0 digest 'bbbb'") != std::string::npos);
  CHECK(s.count("stop", "digest_mismatch") == 1);
  CHECK(s.m.plan_for({1, 0}, 2).kind == PlanQuery::Stopped);
}

TEST_CASE("a worker one step behind T does not take part in the digest check") {
  Sim s(2);
  s.fail_one(2, 0, 11, "old");
  s.join({0, 1});
  s.report({0, 1}, 0, 12, "new");  // e.g. restored elsewhere, at T
  REQUIRE(s.m.plan());
  CHECK(s.m.plan()->target_step == 12);
  CHECK(s.m.plan()->ranks[1].source_rank == 0);
}

TEST_CASE("stale messages from an old generation are ignored and logged") {
  Sim s(3);
  s.fail_one(3, 2, 3, "z");
  s.run_for(2100ms, {{0, 0}, {1, 0}}, 3);
  s.ready_all();
  REQUIRE(s.m.generation() == 2);
  REQUIRE(s.m.phase() == Phase::Running);
  // A late failure report about generation 1 must not revoke generation 2.
  auto a = s.m.failure_report({0, 0}, 1, 3, 2, "peer failed", s.now);
  s.drain();
  CHECK(a.kind == Answer::Stale);
  CHECK(s.m.generation() == 2);
  CHECK(s.m.phase() == Phase::Running);
  CHECK(s.count("stale", "failure_report") == 1);
  // A report for an old round while g runs: stale.
  CHECK(s.report({0, 0}, 1, 3, "z").kind == Answer::Stale);
  // A stale incarnation cannot join.
  s.join({2, 1});
  auto j = s.m.join({2, 0}, s.now);
  CHECK(j.kind == Answer::Refused);
  CHECK(j.reason.find("stale incarnation") != std::string::npos);
  // A current failure report does revoke.
  s.m.failure_report({0, 0}, 2, 3, 1, "transport error", s.now);
  s.drain();
  CHECK(s.m.generation() == 3);
  CHECK(s.last("revoke").cause == "failure_report");
  CHECK(s.last("revoke").worker == WorkerId{1, 0});
}

TEST_CASE("planned grow: a joiner while RUNNING raises reconfigure; members leave g after the same step") {
  Sim s(3);
  s.fail_one(3, 2, 5, "p");
  s.run_for(2100ms, {{0, 0}, {1, 0}}, 5);
  s.ready_all();
  REQUIRE(s.m.members().size() == 2);
  CHECK_FALSE(s.m.heartbeat({0, 0}, 2, 8, s.now).reconfigure);
  // The restarted worker comes back late, after the shrink.
  s.join({2, 1});
  CHECK(s.report_new({2, 1}).ok());
  CHECK(s.m.phase() == Phase::Running);
  CHECK(s.m.plan_for({2, 1}, 0).kind == PlanQuery::Pending);
  CHECK(s.count("reconfigure_requested") == 1);
  auto h = s.m.heartbeat({0, 0}, 2, 8, s.now);
  CHECK(h.reconfigure);
  // R5: both members leave g after step 9 and report for g+1.
  CHECK(s.report({1, 0}, 3, 9, "q").ok());
  CHECK(s.m.generation() == 3);
  CHECK(s.last("revoke").cause == "reconfigure");
  auto h2 = s.m.heartbeat({0, 0}, 2, 9, s.now);
  CHECK(h2.generation == 3);
  CHECK(h2.planned);
  CHECK(s.report({0, 0}, 3, 9, "q").ok());
  REQUIRE(s.m.plan());
  const Plan p = *s.m.plan();
  CHECK(p.target_step == 9);
  CHECK(slots_of(p) == std::vector<int>{0, 1, 2});
  CHECK_FALSE(p.ranks[0].source_rank);
  CHECK_FALSE(p.ranks[1].source_rank);
  CHECK(p.ranks[2].source_rank.has_value());  // only the joiner receives state
  s.ready_all();
  CHECK(s.m.members().size() == 3);
  REQUIRE(s.m.recoveries().size() == 2);
  CHECK(s.m.recoveries()[1].planned);
  CHECK_FALSE(s.m.heartbeat({0, 0}, 3, 9, s.now).reconfigure);
}

TEST_CASE("spares: a joiner at full W waits without reconfigure and fills the next hole") {
  Sim s(2);
  s.form(2);
  s.join_new({5, 0});
  CHECK_FALSE(s.m.reconfigure_flag());
  CHECK(s.m.plan_for({5, 0}, 0).kind == PlanQuery::Pending);
  s.lose({0, 0});
  s.report({1, 0}, 2, 3, "k");
  REQUIRE(s.m.plan());  // the spare's report was carried into the round: W reached at once
  CHECK(slots_of(*s.m.plan()) == std::vector<int>{5, 1});
  CHECK(s.m.plan()->ranks[0].source_rank == 1);
}

TEST_CASE("standby: registered workers outside the last RUNNING generation, until a plan makes them members") {
  // The launcher counts exactly these as its spares (apps/ringfence, --spares): a member
  // must never be listed, nor a worker that failed or left, and a spare stays listed while
  // a recovery is open — it is a member only once the new generation RUNS.
  Sim s(2);
  s.join({0, 0});
  CHECK(s.m.standby() == std::vector<WorkerId>{{0, 0}});  // forming: registered, not yet a member
  s.report({0, 0}, 0, -1, "init");
  s.join({1, 0});
  s.report({1, 0}, 0, -1, "init");
  s.ready_all();
  REQUIRE(s.m.phase() == Phase::Running);
  CHECK(s.m.standby().empty());
  s.join_new({5, 0});
  s.join_new({6, 0});
  CHECK(s.m.standby() == std::vector<WorkerId>{{5, 0}, {6, 0}});
  s.lose({0, 0});  // the dead member is not a spare; the spares still are, during recovery
  CHECK(s.m.standby() == std::vector<WorkerId>{{5, 0}, {6, 0}});
  s.report({1, 0}, 2, 3, "k");
  REQUIRE(s.m.plan());
  CHECK(s.m.standby() == std::vector<WorkerId>{{5, 0}, {6, 0}});  // planned, not RUNNING yet
  s.ready_all();
  REQUIRE(s.m.phase() == Phase::Running);
  CHECK(s.m.standby() == std::vector<WorkerId>{{6, 0}});  // slot 5 is a member now
  REQUIRE(s.m.leave({6, 0}, s.now).ok());                  // a spare that left is gone
  CHECK(s.m.standby().empty());
}

TEST_CASE("minimum world size during recovery: wait until the deadline, then stop with a clear error") {
  Sim s(3, 3);
  s.fail_one(3, 1, 1, "m");
  s.beat_for_ticks(69, {{0, 0}, {2, 0}}, 1, 1);  // window 2 s + min_world_timeout 5 s
  CHECK(s.m.phase() == Phase::Recovering);
  s.beat({{0, 0}, {2, 0}}, 1, 1);
  s.advance(100ms);
  CHECK(s.m.phase() == Phase::Stopped);
  CHECK(s.m.error().find("fewer than the minimum world size 3") != std::string::npos);
}

TEST_CASE("minimum world size: a late joiner before the deadline saves the round") {
  Sim s(3, 3);
  s.fail_one(3, 1, 1, "m");
  s.beat_for_ticks(40, {{0, 0}, {2, 0}}, 1, 1);
  s.join_new({1, 1});
  REQUIRE(s.m.plan());
  CHECK(s.m.plan()->world() == 3);
}

TEST_CASE("replacement: a new incarnation joining while the old one looks alive fails the old one") {
  Sim s(2);
  s.form(2);
  s.join({1, 1});
  CHECK(s.m.generation() == 2);
  CHECK(s.last("revoke").cause == "replaced");
  CHECK(s.m.heartbeat({1, 0}, 1, 0, s.now).fenced);
  auto dup = s.m.join({1, 1}, s.now);
  CHECK(dup.kind == Answer::Refused);
}

TEST_CASE("D4: a worker evicted by its lease may join again as a new member (same incarnation)") {
  Sim s(2, 1);
  s.form(2);
  s.run_for(1200ms, {{0, 0}}, 3);  // slot 1 is cut off: evicted
  REQUIRE(s.m.generation() == 2);
  CHECK(s.m.heartbeat({1, 0}, 1, 3, s.now).fenced);
  s.join({1, 0});  // it fenced itself and comes back
  CHECK(s.report({1, 0}, 0, 3, "x").ok());
  s.report({0, 0}, 2, 3, "x");
  REQUIRE(s.m.plan());
  CHECK(slots_of(*s.m.plan()) == std::vector<int>{0, 1});
}

TEST_CASE("ready timeout: a rank that never becomes ready is evicted and the round revoked") {
  Sim s(2);
  s.fail_one(2, 1, 1, "m");
  s.join_new({1, 1});
  REQUIRE(s.m.plan());
  s.m.ready({0, 0}, 2, s.now);
  for (int i = 0; i < 250 && s.m.generation() == 2; ++i) {
    s.beat({{0, 0}, {1, 1}}, 1, 2);
    s.advance(100ms);
  }
  CHECK(s.m.generation() == 3);
  s.check_evicted_once("ready_timeout", WorkerId{1, 1});
}

TEST_CASE("report timeout: a live member that never reports is evicted and the round revoked") {
  Sim s(3, 1);
  s.form(3);
  s.lose({2, 0});
  REQUIRE(s.m.generation() == 2);
  s.report({0, 0}, 2, 5, "x");
  // slot 1 keeps its lease (heartbeats) but never reports: without the deadline the round
  // waits for it for ever (the join window and min_world wait behind it).
  for (int i = 0; i < 140 && s.m.generation() == 2; ++i) {
    s.beat({{0, 0}, {1, 0}}, 5, 2);
    s.advance(100ms);
  }
  CHECK(s.m.generation() == 2);  // 14 s: not yet
  for (int i = 0; i < 20 && s.m.generation() == 2; ++i) {
    s.beat({{0, 0}, {1, 0}}, 5, 2);
    s.advance(100ms);
  }
  CHECK(s.m.generation() == 3);
  s.check_evicted_once("report_timeout", WorkerId{1, 0});
  CHECK(s.m.heartbeat({1, 0}, 2, 5, s.now).fenced);
}

TEST_CASE("graceful stop: the flag reaches every member, then everybody leaves -> DONE") {
  Sim s(2);
  s.form(2);
  CHECK_FALSE(s.m.heartbeat({0, 0}, 1, 3, s.now).stop);
  s.m.request_stop(s.now);
  s.drain();
  CHECK(s.m.heartbeat({0, 0}, 1, 3, s.now).stop);
  CHECK(s.m.heartbeat({1, 0}, 1, 3, s.now).stop);
  s.m.leave({0, 0}, s.now);
  s.lose({0, 0});  // closing after leave is no failure
  CHECK(s.m.phase() == Phase::Running);
  CHECK(s.count("revoke") == 0);
  CHECK(s.m.max_member_step() == 3);
  s.m.leave({1, 0}, s.now, 5);  // its last heartbeat said 3; the leave carries the step it ended at
  s.drain();
  CHECK(s.m.phase() == Phase::Done);
  CHECK(s.count("done") == 1);
  CHECK(s.m.max_member_step() == 5);
  CHECK(s.m.plan_for({1, 0}, 1).kind == PlanQuery::Done);
}

TEST_CASE("a stop requested while no generation runs ends the job at once") {
  Sim s(2);
  s.form(2);
  s.m.connection_lost({1, 0}, s.now);
  s.report({0, 0}, 2, 4, "x");
  s.m.request_stop(s.now);
  s.drain();
  CHECK(s.m.phase() == Phase::Done);
  CHECK(s.count("done", "stop_during_recovery") == 1);
  CHECK(s.m.plan_for({0, 0}, 2).kind == PlanQuery::Done);
}

TEST_CASE("leaving in the middle of a round without a stop is a failure of the round") {
  Sim s(2);
  s.form(2);
  s.lose({1, 0});
  s.m.leave({0, 0}, s.now);
  s.drain();
  CHECK(s.m.generation() == 3);
  CHECK(s.last("revoke").cause == "left_during_recovery");
}

TEST_CASE("edge answers: unknown workers, rounds not open, early ready, out-of-round failure reports") {
  Sim s(3);
  s.form(3);
  CHECK(s.report({9, 0}, 2, 1, "x").kind == Answer::Fenced);           // never joined
  CHECK(s.report({0, 0}, 5, 1, "x").kind == Answer::Refused);          // a round from the future
  CHECK(s.m.ready({0, 0}, 1, s.now).kind == Answer::Stale);            // ready while g runs
  CHECK(s.m.plan_for({0, 0}, 1).kind == PlanQuery::Ready);             // a late poller gets g's plan
  s.m.process_exited({7, 3}, 1, s.now, s.now);                         // unknown: ignored
  s.drain();
  CHECK(s.m.generation() == 1);
  // A member reporting for g+1 with no planned change left g on its own: like a failure.
  CHECK(s.report({2, 0}, 2, 6, "x").ok());
  CHECK(s.m.generation() == 2);
  CHECK(s.last("revoke").cause == "member_left_generation");
  CHECK(s.m.ready({0, 0}, 2, s.now).kind == Answer::Stale);            // no plan yet
  CHECK(s.report({0, 0}, 3, 6, "x").kind == Answer::Refused);          // g+2 is not open
  // A joiner (not a participant) reporting a failure of another joiner: no revocation.
  s.join({7, 0});
  s.join({8, 0});
  s.m.failure_report({7, 0}, 2, -1, 8, "cannot reach", s.now);
  s.drain();
  CHECK(s.m.generation() == 2);
  s.lose({7, 0});  // an unplaced joiner dying does not revoke either
  CHECK(s.m.generation() == 2);
}

TEST_CASE("a rank of the plan reporting again stays in its round; a late joiner waits for the next") {
  Sim s(2);
  s.form(2);
  s.m.connection_lost({1, 0}, s.now);
  s.report({0, 0}, 2, 4, "x");
  s.join_new({1, 1});
  REQUIRE(s.m.plan());
  CHECK(s.report({0, 0}, 2, 4, "x").ok());  // repeated
  CHECK(s.m.plan_for({0, 0}, 2).kind == PlanQuery::Ready);
  s.join_new({5, 0});
  CHECK(s.m.plan_for({5, 0}, 0).kind == PlanQuery::Pending);
  s.ready_all();
  CHECK(s.m.phase() == Phase::Running);
  CHECK(s.m.plan_for({5, 0}, 0).kind == PlanQuery::Pending);  // standby at full W
}

TEST_CASE("after the job finished, joins and reports are answered 'finished', a kind of their own") {
  Sim s(2);
  s.form(2);
  s.m.leave({0, 0}, s.now);
  s.m.leave({1, 0}, s.now);
  REQUIRE(s.m.phase() == Phase::Done);
  CHECK(s.m.join({3, 0}, s.now).kind == Answer::Finished);
  CHECK(s.m.report({0, 0}, 2, StateReport{}, s.now).kind == Answer::Finished);
  CHECK(s.m.ready_state({0, 0}, 1).kind == ReadyQuery::Done);
}

TEST_CASE("after the job stopped, joins and reports are answered 'stopped' with its error") {
  Sim s(2, 2);
  s.form(2);
  s.lose({1, 0});
  REQUIRE(s.report({0, 0}, 2, -1, "init").ok());
  s.run_for(s.opt.join_window + s.opt.min_world_timeout + 100ms, {{0, 0}}, -1);
  REQUIRE(s.m.phase() == Phase::Stopped);
  const JoinResult j = s.m.join({3, 0}, s.now);
  CHECK(j.kind == Answer::Stopped);
  CHECK(j.reason == s.m.error());
  CHECK(s.m.report({0, 0}, 2, StateReport{}, s.now).kind == Answer::Stopped);
}

TEST_CASE("process_exited answers what the coordinator knew: registered (ever joined), left (gracefully, first)") {
  Sim s(2);
  // Never joined: neither, and nothing happens.
  auto e = s.m.process_exited({0, 0}, 7, s.now, s.now);
  CHECK_FALSE(e.registered);
  CHECK_FALSE(e.left);
  s.form(2);
  // Joined and crashed (its connection closed first): registered, not left.
  s.lose({1, 0});
  e = s.m.process_exited({1, 0}, 9, s.now, s.now);
  CHECK(e.registered);
  CHECK_FALSE(e.left);
  // Its replacement joined: the old incarnation is still one that registered, and the
  // new one's state does not answer for it (not left), nor does its exit revoke again.
  s.join_new({1, 1});
  s.report({0, 0}, 2, 4, "x");
  s.ready_all();
  REQUIRE(s.m.phase() == Phase::Running);
  const uint64_t g = s.m.generation();
  e = s.m.process_exited({1, 0}, 9, s.now, s.now);
  CHECK(e.registered);
  CHECK_FALSE(e.left);
  CHECK(s.m.generation() == g);
  // An incarnation that never joined, although its slot did: not registered.
  CHECK_FALSE(s.m.process_exited({1, 5}, 1, s.now, s.now).registered);
  // A member that finished and left, then exited non-zero while the other trains: left,
  // and no revocation (the job no longer counts on it).
  REQUIRE(s.m.leave({0, 0}, s.now).ok());
  s.lose({0, 0});
  e = s.m.process_exited({0, 0}, 3, s.now, s.now);
  CHECK(e.registered);
  CHECK(e.left);
  CHECK_FALSE(s.m.process_exited({0, 5}, 3, s.now, s.now).left);  // another incarnation's
  CHECK(s.m.generation() == g);
  CHECK(s.m.phase() == Phase::Running);
  // A live member's exit: registered, not left, and it revokes (D1).
  e = s.m.process_exited({1, 1}, 1, s.now, s.now);
  s.drain();
  CHECK(e.registered);
  CHECK_FALSE(e.left);
  CHECK(s.last("fail").cause == "process_exited");
}

TEST_CASE("worker_injected: every fired step= spec is logged and listed, the list bounded") {
  Sim s(2);
  s.form(2);
  s.m.worker_injected({1, 0}, 1, 20, "kill:rank=1:step=20", s.now);
  s.m.worker_injected({7, 3}, 1, 21, "hang:rank=0:step=21", s.now);  // unknown worker: still a fact
  s.drain();
  REQUIRE(s.m.fired().size() == 2);
  CHECK(s.m.fired()[0].spec == "kill:rank=1:step=20");
  CHECK(s.m.fired()[0].worker == WorkerId{1, 0});
  CHECK(s.m.fired()[0].step == 20);
  CHECK(s.m.fired()[1].worker == WorkerId{7, 3});
  CHECK(s.count("injected") == 2);
  CHECK(s.last("injected").detail == "hang:rank=0:step=21");
  CHECK(s.m.phase() == Phase::Running);  // nothing else changes
  for (size_t i = 0; i < Membership::kMaxFired + 10; ++i) s.m.worker_injected({0, 0}, 1, 5, "slow:rank=0:step=5", s.now);
  s.drain();
  CHECK(s.m.fired().size() == Membership::kMaxFired);
  CHECK(s.count("injected") == static_cast<int>(Membership::kMaxFired) + 12);
}

TEST_CASE("worker_fatal: a live worker's fatal error STOPs the job with it, in any phase; the first one counts") {
  SUBCASE("while RUNNING") {
    Sim s(2);
    s.form(2);
    CHECK(s.m.worker_fatal({1, 0}, "bad --ckpt-dir", s.now).ok());
    s.drain();
    CHECK(s.m.phase() == Phase::Stopped);
    CHECK(s.m.error() == "slot 1 (incarnation 0) cannot run: bad --ckpt-dir");
    CHECK(s.count("stop", "worker_fatal") == 1);
    // Everyone learns it with the error; a second fatal changes nothing.
    CHECK(s.m.plan_for({0, 0}, 2).kind == PlanQuery::Stopped);
    CHECK(s.m.plan_for({0, 0}, 2).error == s.m.error());
    auto a = s.m.join({1, 1}, s.now);
    CHECK(a.kind == Answer::Stopped);
    CHECK(a.reason == s.m.error());
    CHECK(s.m.worker_fatal({0, 0}, "other", s.now).kind == Answer::Stopped);
    s.drain();
    CHECK(s.m.error() == "slot 1 (incarnation 0) cannot run: bad --ckpt-dir");
    CHECK(s.count("stop") == 1);
  }
  SUBCASE("while a recovery waits for its plan, and from a joiner while forming") {
    Sim s(2);
    s.form(2);
    s.lose({1, 0});
    s.report({0, 0}, 2, 4, "x");
    REQUIRE(s.m.phase() == Phase::Recovering);
    s.join({1, 1});
    CHECK(s.m.worker_fatal({1, 1}, "e", s.now).ok());
    CHECK(s.m.phase() == Phase::Stopped);
    auto q = s.m.ready_state({0, 0}, 2);
    CHECK(q.kind == ReadyQuery::Stopped);
    CHECK(q.error == "slot 1 (incarnation 1) cannot run: e");
    Sim f(2);
    f.join({0, 0});
    CHECK(f.m.worker_fatal({0, 0}, "e", f.now).ok());
    CHECK(f.m.phase() == Phase::Stopped);
  }
  SUBCASE("not from an unknown, evicted or replaced incarnation; not once the job is over") {
    Sim s(2, 1);
    s.form(2);
    CHECK(s.m.worker_fatal({5, 0}, "e", s.now).kind == Answer::Fenced);  // never joined
    s.join({1, 1});                                                       // replaces (1, 0)
    CHECK(s.m.worker_fatal({1, 0}, "e", s.now).kind == Answer::Fenced);
    s.run_for(1200ms, {{0, 0}}, 3);                                        // (1, 1) evicted (D2)
    CHECK(s.m.heartbeat({1, 1}, 2, 3, s.now).fenced);
    CHECK(s.m.worker_fatal({1, 1}, "e", s.now).kind == Answer::Fenced);
    CHECK(s.m.phase() != Phase::Stopped);
    CHECK(s.m.error().empty());
    Sim d(2);
    d.form(2);
    d.m.leave({0, 0}, d.now);
    d.m.leave({1, 0}, d.now);
    REQUIRE(d.m.phase() == Phase::Done);
    CHECK(d.m.worker_fatal({0, 0}, "e", d.now).kind == Answer::Stopped);
    CHECK(d.m.phase() == Phase::Done);
    CHECK(d.m.error().empty());
  }
}

TEST_CASE("generations only grow, whatever the sequence of events (random replay)") {
  Sim s(3, 2);
  s.form(3);
  std::vector<int64_t> inc = {0, 0, 0};
  std::vector<bool> alive = {true, true, true};
  uint64_t lcg = 12345;
  auto rnd = [&](uint64_t n) {
    lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
    return (lcg >> 33) % n;
  };
  uint64_t last = s.m.generation();
  for (int i = 0; i < 3000 && s.m.phase() != Phase::Stopped; ++i) {
    const int slot = static_cast<int>(rnd(3));
    const WorkerId w{slot, inc[slot]};
    switch (rnd(7)) {
      case 0:
        if (alive[slot]) s.m.connection_lost(w, s.now), alive[slot] = false;
        break;
      case 1:
        if (!alive[slot]) {
          ++inc[slot];
          alive[slot] = s.m.join({slot, inc[slot]}, s.now).ok();
          if (alive[slot]) s.m.report({slot, inc[slot]}, 0, StateReport{}, s.now);
        }
        break;
      case 2:
        if (alive[slot]) s.m.report(w, s.m.generation(), StateReport{true, 4, "same"}, s.now);
        break;
      case 3:
        if (s.m.plan())
          for (auto& r : s.m.plan()->ranks) s.m.ready(r.worker, s.m.plan()->generation, s.now);
        break;
      case 4:
        if (alive[slot]) s.m.failure_report(w, s.m.generation() - rnd(2), 4, std::nullopt, "x", s.now);
        break;
      default:
        for (int k = 0; k < 3; ++k)
          if (alive[k]) s.m.heartbeat({k, inc[k]}, s.m.generation(), 4, s.now);
        s.advance(std::chrono::milliseconds(rnd(400)));
    }
    s.drain();
    REQUIRE(s.m.generation() >= last);
    last = s.m.generation();
    if (s.m.phase() == Phase::Running) {
      CHECK(s.m.members().size() >= 2);
      CHECK(s.m.members().size() <= 3);
    }
  }
  std::vector<uint64_t> revoked;
  for (auto& t : s.log)
    if (t.event == TransitionEvent::Revoke) revoked.push_back(t.generation);
  CHECK(revoked.size() > 10);
  CHECK(std::is_sorted(revoked.begin(), revoked.end()));
  CHECK(std::adjacent_find(revoked.begin(), revoked.end()) == revoked.end());  // never reused
}

TEST_CASE("options are validated") {
  MembershipOptions o;
  o.target_world = 2;
  o.min_world = 3;
  CHECK_THROWS_AS(Membership(o, rf::TimePoint{}), rf::InvalidInput);
  o.min_world = 1;
  o.heartbeat = 2s;
  CHECK_THROWS_AS(Membership(o, rf::TimePoint{}), rf::InvalidInput);
  o.heartbeat = 100ms;
  o.job_id = std::string(kMaxJobIdBytes, 'j');
  CHECK_NOTHROW(Membership(o, rf::TimePoint{}));
  o.job_id += "j";  // a plan could not carry it
  CHECK_THROWS_AS(Membership(o, rf::TimePoint{}), rf::InvalidInput);
}
