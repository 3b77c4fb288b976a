// The stall bound learned from step times (D3), the activity the heartbeats carry, and the
// checkpoint policy that keeps a slow disk from stalling a step.
#include <doctest/doctest.h>

#include <sched.h>

#include <atomic>
#include <thread>
#include <vector>


#include "base/error.h"
#include "ddp/activity.h"
#include "ddp/checkpoint_policy.h"
#include "ddp/stall_bound.h"
#include "tests/skip.h"

using namespace rf::ddp;
using namespace std::chrono_literals;

TEST_CASE("stall bound: the ceiling until warm, then step_factor x the median within [floor, ceiling]") {
  StallBound b;  // defaults: floor 1 s, ceiling 30 s, x20, warm after 3 steps
  CHECK(b.step_bound() == 30s);
  b.observe(400ms);  // a first step: page faults, caches
  b.observe(100ms);
  CHECK(b.step_bound() == 30s);
  b.observe(100ms);
  CHECK(b.step_bound() == 2s);  // median 100 ms x 20
  for (int i = 0; i < 64; ++i) b.observe(4ms);  // a small MLP
  CHECK(b.median_step() == 4ms);
  CHECK(b.step_bound() == 1s);  // the floor
  for (int i = 0; i < 64; ++i) b.observe(5s);   // a big model
  CHECK(b.step_bound() == 30s);                 // the ceiling
  CHECK(StallBound::comm_stall(1s) == 1500ms);
}

TEST_CASE("stall bound: one 10x step does not move it; a rank 5x slower for many steps raises it") {
  StallBound b;
  for (int i = 0; i < 64; ++i) b.observe(100ms);
  const rf::Duration before = b.step_bound();
  CHECK(before == 2s);
  b.observe(1s);  // 10x, once: still within the bound, and the median holds
  CHECK(b.step_bound() == before);
  // Slower steps than 5x the median pass under the bound while the window turns over.
  for (int i = 0; i < 40; ++i) {
    CHECK(500ms < b.step_bound());
    b.observe(500ms);
  }
  CHECK(b.step_bound() == 10s);  // median 500 ms x 20
}

TEST_CASE("stall bound: recovery is bounded by the state's size, within the same limits") {
  StallBound b;
  CHECK(b.recovery_bound(0) == 1s);
  CHECK(b.recovery_bound(100'000'000) == 2s);             // floor + 100 MB at 100 MB/s
  CHECK(b.recovery_bound(uint64_t{800} << 20) > 9s);      // a 100M-parameter state with momentum
  CHECK(b.recovery_bound(uint64_t{1} << 40) == 30s);      // the ceiling
}

TEST_CASE("stall bound: options that make no sense are refused, naming them") {
  StallBoundOptions o;
  o.floor = 0s;
  CHECK_THROWS_AS(StallBound{o}, rf::InvalidInput);
  o.floor = 2s;
  o.ceiling = 1s;
  CHECK_THROWS_WITH_AS(StallBound{o}, doctest::Contains("at most the ceiling"), rf::InvalidInput);
  o = {};
  o.step_factor = 0;
  CHECK_THROWS_AS(StallBound{o}, rf::InvalidInput);
}

TEST_CASE("activity board: idle, computing in a step, waiting inside a collective, back to computing") {
  using rf::elastic::Activity;
  ActivityBoard b;
  CHECK(b.read(rf::Clock::now()).kind == Activity::Idle);
  b.compute(ActivityBoard::Region::Step, 325, 1s);
  Activity a = b.read(rf::Clock::now() + 5ms);
  CHECK(a.kind == Activity::Compute);
  CHECK(a.bound == 1s);
  CHECK(a.elapsed >= 5ms);
  CHECK(a.where == "step 325");
  {
    ActivityBoard::WaitScope w(b);
    a = b.read(rf::Clock::now());
    CHECK(a.kind == Activity::Wait);
    CHECK(a.elapsed < 5ms);  // the wait's own clock
  }
  a = b.read(rf::Clock::now());
  CHECK(a.kind == Activity::Compute);  // a new compute span starts after the wait
  CHECK(a.elapsed < 5ms);
  b.compute(ActivityBoard::Region::Recovery, 3, 2s);
  CHECK(b.read(rf::Clock::now()).where == "recovery to generation 3");
  b.idle();
  CHECK(b.read(rf::Clock::now()).kind == Activity::Idle);
}

TEST_CASE("checkpoint policy: a periodic checkpoint waits for a busy writer by deferring, a forced one saves") {
  using rf::ddp::CheckpointAction;
  using rf::ddp::checkpoint_action;
  using rf::ddp::CheckpointView;
  CHECK(checkpoint_action({.step = 3, .every = 5}) == CheckpointAction::None);
  CHECK(checkpoint_action({.step = 4, .every = 5}) == CheckpointAction::Save);  // steps 0..4 done
  CHECK(checkpoint_action({.step = 4, .every = 5, .writer_busy = true}) == CheckpointAction::Defer);  // a slow disk
  CHECK(checkpoint_action({.step = 5, .every = 5, .deferred = true, .writer_busy = true}) ==
        CheckpointAction::Defer);  // still busy
  CHECK(checkpoint_action({.step = 6, .every = 5, .deferred = true}) == CheckpointAction::Save);  // the writer is free
  CHECK(checkpoint_action({.step = 6, .every = 0, .forced = true, .writer_busy = true}) ==
        CheckpointAction::Save);  // stop / end / R5
  CHECK(checkpoint_action({.step = 9, .every = 0}) == CheckpointAction::None);  // no periodic ones
}

TEST_CASE("activity board: the training thread's time waiting for a CPU is reported, from the activity's start") {
  using rf::elastic::Activity;
  if (!rf::ThreadCpuClock(rf::current_tid()).available())
    return rf::test::skip("this kernel has no /proc/self/task/TID/schedstat");
  // This thread and two busy ones share one CPU: this one is runnable but waiting about
  // two thirds of the time, like a rank next to a CPU hog.
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(sched_getcpu(), &one);
  cpu_set_t before;
  REQUIRE(sched_getaffinity(0, sizeof before, &before) == 0);
  REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
  std::atomic<bool> stop{false};
  std::vector<std::thread> hogs;
  for (int i = 0; i < 2; ++i)
    hogs.emplace_back([&] {
      sched_setaffinity(0, sizeof one, &one);
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  ActivityBoard b;
  b.attach_thread(rf::current_tid());
  b.read(rf::Clock::now());  // the heartbeat before the step
  b.compute(ActivityBoard::Region::Step, 1, 1s);
  const rf::TimePoint end = rf::Clock::now() + 300ms;
  while (rf::Clock::now() < end) {
  }
  const Activity a = b.read(rf::Clock::now());
  stop = true;
  for (auto& t : hogs) t.join();
  sched_setaffinity(0, sizeof before, &before);
  CHECK(a.kind == Activity::Compute);
  CHECK(a.runnable >= a.elapsed / 4);
  CHECK(a.runnable <= a.elapsed);
  b.compute(ActivityBoard::Region::Step, 2, 1s);  // a new activity starts from the last sample
  CHECK(b.read(rf::Clock::now()).runnable < 50ms);
}
