// The coordinator's judgement of a live member from its heartbeats' activity (D3):
// computing past its bound is hung, waiting inside one collective past wedge_factor bounds
// is wedged, idle or a stale heartbeat is never judged. Simulated clock only.
#include <doctest/doctest.h>

#include <string>

#include "elastic/liveness.h"

using namespace rf::elastic;
using namespace std::chrono_literals;

namespace {
const rf::TimePoint t0 = rf::TimePoint{} + 100s;
constexpr double kWedge = 2.0;
constexpr rf::Duration kFresh = 200ms;
Activity doing(Activity::Kind k, rf::Duration elapsed, rf::Duration bound = 1s) {
  return Activity{k, elapsed, {}, bound, "step 325"};
}
}  // namespace

TEST_CASE("liveness: computing is judged hung once the elapsed time, extrapolated from the heartbeat, passes the bound") {
  // The heartbeat left 900 ms into the step's compute and arrived at t0.
  const Activity a = doing(Activity::Compute, 900ms);
  CHECK(judge_activity(t0, a, t0, kWedge, kFresh).kind == LivenessVerdict::Alive);
  CHECK(judge_activity(t0 + 100ms, a, t0, kWedge, kFresh).kind == LivenessVerdict::Alive);  // exactly the bound
  const LivenessVerdict v = judge_activity(t0 + 101ms, a, t0, kWedge, kFresh);
  CHECK(v.kind == LivenessVerdict::Hung);
  CHECK(v.elapsed == 1001ms);
  CHECK(v.first_seen == t0 + 100ms);  // began at t0 - 900 ms, plus the 1 s bound
  CHECK(v.detail.find("step 325") != std::string::npos);
  CHECK(v.detail.find("outside any collective") != std::string::npos);
}

TEST_CASE("liveness: a wait inside a collective is left to its own D3 up to wedge_factor bounds") {
  // Its own D3 fires at 1.5 bounds; the heartbeat left 1.9 s into the wait.
  const Activity a = doing(Activity::Wait, 1900ms);
  CHECK(judge_activity(t0, a, t0, kWedge, kFresh).kind == LivenessVerdict::Alive);
  CHECK(judge_activity(t0 + 100ms, a, t0, kWedge, kFresh).kind == LivenessVerdict::Alive);  // 2 bounds exactly
  const LivenessVerdict v = judge_activity(t0 + 101ms, a, t0, kWedge, kFresh);
  CHECK(v.kind == LivenessVerdict::Wedged);
  CHECK(v.first_seen == t0 + 100ms);
  CHECK(v.detail.find("communicator is stuck") != std::string::npos);
}

TEST_CASE("liveness: idle, unbounded and stale activities are never judged") {
  CHECK(judge_activity(t0, doing(Activity::Idle, 1h), t0, kWedge, kFresh).kind == LivenessVerdict::Alive);
  CHECK(judge_activity(t0, doing(Activity::Compute, 1h, 0s), t0, kWedge, kFresh).kind == LivenessVerdict::Alive);
  // The process stopped heartbeating (SIGSTOP): its lease decides, with its own cause.
  const Activity a = doing(Activity::Compute, 900ms);
  CHECK(judge_activity(t0 + 150ms, a, t0, kWedge, kFresh).kind == LivenessVerdict::Hung);
  CHECK(judge_activity(t0 + 201ms, a, t0, kWedge, kFresh).kind == LivenessVerdict::Stale);
  CHECK(std::string(to_string(LivenessVerdict::Stale)) == "stale");
}

TEST_CASE("liveness: a slow step within its bound (10x a 50 ms median under a 1 s bound) is alive") {
  CHECK(judge_activity(t0, doing(Activity::Compute, 500ms), t0, kWedge, kFresh).kind == LivenessVerdict::Alive);
  CHECK(judge_activity(t0, doing(Activity::Wait, 1400ms), t0, kWedge, kFresh).kind == LivenessVerdict::Alive);
}

TEST_CASE("liveness: time a member only waited for a CPU is not counted (a CPU hog starves, it does not hang)") {
  // 1.3 s into its compute, 0.8 s of which it was runnable but had no CPU.
  Activity a{Activity::Compute, 1300ms, 800ms, 1s, "step 279"};
  CHECK(judge_activity(t0, a, t0, kWedge, kFresh).kind == LivenessVerdict::Alive);
  a.runnable = 200ms;  // mostly blocked: hung
  const LivenessVerdict v = judge_activity(t0, a, t0, kWedge, kFresh);
  CHECK(v.kind == LivenessVerdict::Hung);
  CHECK(v.elapsed == 1100ms);
  CHECK(v.first_seen == t0 - 100ms);
  CHECK(v.detail.find("not counting 0.2 s it waited for a CPU") != std::string::npos);
  // More waiting reported than elapsed (clock granularity): never a negative time.
  a.runnable = 2s;
  CHECK(judge_activity(t0, a, t0, kWedge, kFresh).kind == LivenessVerdict::Alive);
}

TEST_CASE("liveness: time the whole process was frozen is not counted (a paused VM, a SIGSTOP within the lease)") {
  // 2.6 s into its compute, 2.5 s of which the process did not run at all.
  Activity a{Activity::Compute, 2600ms, 0ms, 1s, "step 12"};
  a.frozen = 2500ms;
  CHECK(judge_activity(t0, a, t0, kWedge, kFresh).kind == LivenessVerdict::Alive);
  // Frozen and starved add up; past the bound even so: hung, and the detail says both.
  a.runnable = 300ms;
  a.frozen = 1000ms;
  const LivenessVerdict v = judge_activity(t0, a, t0, kWedge, kFresh);
  CHECK(v.kind == LivenessVerdict::Hung);
  CHECK(v.elapsed == 1300ms);
  CHECK(v.first_seen == t0 - 300ms);
  CHECK(v.detail.find("not counting 0.3 s it waited for a CPU nor 1 s the whole process was frozen") !=
        std::string::npos);
  // Inside a collective: the wedge limit counts without the freeze too.
  Activity w{Activity::Wait, 4s, 0ms, 1s, "step 12"};
  w.frozen = 2500ms;
  CHECK(judge_activity(t0, w, t0, kWedge, kFresh).kind == LivenessVerdict::Alive);
  // More reported than elapsed: never a negative time.
  a.runnable = 2s;
  a.frozen = 2s;
  CHECK(judge_activity(t0, a, t0, kWedge, kFresh).kind == LivenessVerdict::Alive);
}
