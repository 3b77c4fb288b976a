// decide_round (docs/protocol.md step 3) as a pure function on a simulated clock: when a round
// waits, closes or stops the job, with a typed reason; every deadline counts from the
// round's own start.
#include <doctest/doctest.h>

#include "elastic/round_decision.h"

using namespace rf::elastic;
using namespace std::chrono_literals;
using R = RoundDecision::Reason;

namespace {
const rf::TimePoint t0 = rf::TimePoint{} + 100s;
MembershipOptions opts(int target, int min) {
  MembershipOptions o;  // the defaults: join window 2 s, min_world_timeout 30 s, form 60 s
  o.target_world = target;
  o.min_world = min;
  return o;
}
// The decision's kind and its typed reason.
void expect(const RoundDecision& d, RoundDecision::Kind kind, R reason) {
  CHECK(d.kind == kind);
  CHECK(d.reason == reason);
}
RoundView round(int reported, int missing = 0, rf::TimePoint started = t0) {
  RoundView v;
  v.generation = 3;
  v.started = started;
  v.reported = reported;
  v.members_missing = missing;
  return v;
}
}  // namespace

TEST_CASE("decide_round: a live member that has not reported holds the round, whatever the time") {
  const RoundDecision d = decide_round(t0 + 1h, round(3, 1), opts(4, 4));
  expect(d, RoundDecision::Wait, R::MembersMissing);
}

TEST_CASE("decide_round: the target world closes the round at once") {
  const RoundDecision d = decide_round(t0, round(4), opts(4, 2));
  expect(d, RoundDecision::Close, R::TargetReached);
}

TEST_CASE("decide_round: below the target, joiners get the window; then a shrink to at least min_world closes") {
  const MembershipOptions o = opts(4, 3);
  RoundDecision d = decide_round(t0 + 1999ms, round(3), o);
  expect(d, RoundDecision::Wait, R::WindowOpen);
  CHECK(d.deadline == t0 + 2s);
  d = decide_round(t0 + 2s, round(3), o);
  expect(d, RoundDecision::Close, R::WindowPassed);
}

TEST_CASE("decide_round: below min_world it waits the window plus min_world_timeout, then stops with the error") {
  const MembershipOptions o = opts(4, 4);
  RoundDecision d = decide_round(t0 + 31s, round(3), o);
  expect(d, RoundDecision::Wait, R::BelowMinWorld);
  CHECK(d.deadline == t0 + 32s);
  d = decide_round(t0 + 32s, round(3), o);
  expect(d, RoundDecision::Stop, R::BelowMinWorld);
  CHECK(d.error.find("only 3 worker(s) reported for generation 3, fewer than the minimum world size 4") == 0);
}

TEST_CASE("decide_round: a round opened late (a member evicted 31 s into the episode) gets its whole wait") {
  // The episode began at t0; its first round waited for a silent member, evicted at
  // t0 + 31 s, which opened this round. Counting from t0 stopped the job at once.
  const MembershipOptions o = opts(4, 4);
  const RoundView late = round(3, 0, t0 + 31s);
  CHECK(decide_round(t0 + 31s, late, o).kind == RoundDecision::Wait);
  CHECK(decide_round(t0 + 31s + 500ms, late, o).reason == R::WindowOpen);
  CHECK(decide_round(t0 + 62s, late, o).kind == RoundDecision::Wait);
  CHECK(decide_round(t0 + 63s, late, o).kind == RoundDecision::Stop);
  // The replacement reports within the window: the round closes with the target.
  CHECK(decide_round(t0 + 31s + 400ms, round(4, 0, t0 + 31s), o).reason == R::TargetReached);
}

TEST_CASE("decide_round: forming counts the primaries only and waits form_timeout") {
  MembershipOptions o = opts(2, 1);
  RoundView v = round(2);
  v.forming = true;
  v.primaries_reported = 1;  // a spare (slot 2) and one primary
  RoundDecision d = decide_round(t0 + 59s, v, o);
  CHECK(d.kind == RoundDecision::Wait);
  CHECK(d.deadline == t0 + 60s);
  v.primaries_reported = 2;
  CHECK(decide_round(t0, v, o).reason == R::TargetReached);
}
