// StepWatch: which stall bound the heartbeats carry for what the training thread does, and
// the communicator stall timeout each implies (D3). The board is read at a chosen time.
#include <doctest/doctest.h>

#include "ddp/step_watch.h"

using namespace rf::ddp;
using namespace std::chrono_literals;
using rf::Clock;
using rf::elastic::Activity;

TEST_CASE("step watch: a step is judged by the learned bound, the communicator gets 1.5 of it") {
  StepWatch w(StallBoundOptions{});  // floor 1 s, ceiling 30 s, x20, warm after 3 steps
  CHECK(w.begin_step(0) == 45s);     // not warm: the ceiling
  Activity a = w.board().read(Clock::now() + 10s);
  CHECK(a.kind == Activity::Compute);
  CHECK(a.bound == 30s);
  CHECK(a.where == "step 0");
  CHECK(a.elapsed >= 10s);
  for (int i = 0; i < 3; ++i) w.end_step(100ms);
  CHECK(w.begin_step(3) == 3s);  // 20 x 100 ms = 2 s, x1.5
  a = w.board().read(Clock::now());
  CHECK(a.bound == 2s);
  CHECK(a.where == "step 3");
}

TEST_CASE("step watch: a recovery is judged by the state's size, the same bound through its phases") {
  StepWatch w(StallBoundOptions{});
  for (int i = 0; i < 10; ++i) w.end_step(4s);  // slow steps do not change a recovery's bound
  CHECK(w.begin_recovery(4, 100'000'000) == 3000ms);  // 1 s + 100 MB at 100 MB/s = 2 s, x1.5
  Activity a = w.board().read(Clock::now());
  CHECK(a.kind == Activity::Compute);
  CHECK(a.bound == 2s);
  CHECK(a.where == "recovery to generation 4");
  w.idle();  // connecting: not judged
  CHECK(w.board().read(Clock::now() + 1h).kind == Activity::Idle);
  w.continue_recovery();
  a = w.board().read(Clock::now());
  CHECK(a.kind == Activity::Compute);
  CHECK(a.bound == 2s);
  CHECK(a.where == "recovery to generation 4");
  {
    ActivityBoard::WaitScope waiting(w.board());  // inside a collective of the recovery
    CHECK(w.board().read(Clock::now()).kind == Activity::Wait);
  }
  CHECK(w.board().read(Clock::now()).kind == Activity::Compute);
}

TEST_CASE("step watch: a call to the coordinator in a recovery is idle, however long it takes") {
  // Reporting a failure or a phase's time on a lossy link can wait a second and more for
  // TCP; that is the coordinator's wait (with its own timeout), not a hung worker (D3).
  StepWatch w(StallBoundOptions{});
  w.begin_recovery(4, 1'000'000);
  {
    ActivityBoard::IdleScope talking(w.board());
    CHECK(w.board().read(Clock::now() + 1h).kind == Activity::Idle);
  }
  Activity a = w.board().read(Clock::now());
  CHECK(a.kind == Activity::Compute);  // back to the recovery's work, a new start
  CHECK(a.elapsed < 1s);
  CHECK(a.where == "recovery to generation 4");
  {
    ActivityBoard::WaitScope waiting(w.board());
    ActivityBoard::IdleScope talking(w.board());  // e.g. a fault about to fire mid-collective
  }
  CHECK(w.board().read(Clock::now()).kind == Activity::Compute);
  ActivityBoard::WaitScope waiting(w.board());
  { ActivityBoard::IdleScope talking(w.board()); }
  CHECK(w.board().read(Clock::now()).kind == Activity::Wait);  // what it was doing before the call
}

TEST_CASE("step watch: without a coordinator the communicator keeps the fixed ceiling") {
  StallBoundOptions o;
  o.ceiling = 12s;
  StepWatch w(o);
  CHECK(w.fixed_comm_stall() == 12000ms);
  CHECK(StepWatch::whole_ms(200us) == 1ms);   // never 0: a zero timeout would fire at once
  CHECK(StepWatch::whole_ms(1500200us) == 1501ms);  // rounded up, never shorter
}

TEST_CASE("step watch: a freeze counts toward the activity it fell in, from the sample before it began") {
  StepWatch w(StallBoundOptions{});
  w.begin_step(0);
  // The very first read has no earlier sample: what the counter says then is its base. The
  // process was frozen 300 ms before step 1 (the last read already said so), then 2.5 s in it.
  CHECK(w.board().read(Clock::now(), 300ms).frozen == 0ms);
  w.begin_step(1);  // a new activity from here
  CHECK(w.board().read(Clock::now(), 300ms).frozen == 0ms);
  Activity a = w.board().read(Clock::now(), 2800ms);
  CHECK(a.where == "step 1");
  CHECK(a.frozen == 2500ms);
  // A freeze between the last read and the start of an activity is counted in it: a little
  // more than there was, never less (a verdict can only come late).
  w.begin_step(2);
  CHECK(w.board().read(Clock::now(), 3000ms).frozen == 200ms);
  w.idle();
  CHECK(w.board().read(Clock::now(), 9s).frozen == 0ms);  // idle is never judged
}
