// The loopback Communicator's failures (tests/comm/inproc/loopback_communicator.h): abort,
// abort_failed, inject_drop, a killed rank, a stalled one; what the rank itself and its
// peers see. Faults fire on conditions (a chunk count, a flag), never at a guessed time.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/error.h"
#include "comm/errors.h"
#include "tests/comm/inproc/loopback_communicator.h"
#include "tests/comm/inproc/loopback_testing.h"

using namespace rf::comm;
using namespace rf::comm::inproc;
using namespace rf::comm::inproc::testing;

TEST_CASE("loopback communicator: abort from another thread ends a blocked wait at once; peers fail Aborted, relayed") {
  const int world = 3;
  LoopbackNetwork net;
  std::vector<std::shared_ptr<Communicator>> comms(world);
  for (int r = 0; r < world; ++r) comms[r] = net.connect(options(r, world, 1));
  std::vector<Outcome> out(world);
  std::atomic<bool> waiting{false};
  std::atomic<Clock::time_point::rep> aborted_at{0};
  std::thread aborter([&] {
    const auto until = Clock::now() + kBound;
    while (!waiting.load() && Clock::now() < until) std::this_thread::yield();
    aborted_at.store(Clock::now().time_since_epoch().count());
    comms[0]->abort("test: generation 1 revoked");
  });
  spawn(world, [&](int rank) {
    std::vector<float> v(64, 1.0f);
    if (rank == 2) {  // joins only after the abort: rank 0 and 1 are blocked until then
      const auto until = Clock::now() + kBound;
      while (!comms[0]->aborted() && Clock::now() < until) std::this_thread::yield();
    }
    auto w = comms[rank]->allreduce_start(f32(v), {5, 0});
    if (rank == 0) waiting.store(true);
    out[rank] = outcome_of([&] { w->wait(Clock::now() + kBound); });
    const Clock::time_point t0{Clock::duration(aborted_at.load())};
    if (rank == 0) out[0].ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  });
  aborter.join();
  CHECK(out[0].kind == "Aborted");
  CHECK(contains(out[0].what, "test: generation 1 revoked"));
  CHECK(out[0].ms < 200);
  for (int r = 1; r < world; ++r) {
    CAPTURE(out[r].what);
    CHECK(out[r].kind == "Aborted");
    CHECK(out[r].peer == -1);  // nobody failed
    CHECK(contains(out[r].what, "test: generation 1 revoked; relayed by rank"));
  }
  // Poisoned: what comes next fails at once, with the same error.
  std::vector<float> v(4);
  CHECK(outcome_of([&] { comms[1]->allreduce(f32(v), {6, 0}); }).kind == "Aborted");
}

TEST_CASE("loopback communicator: abort_failed from the chunk hook: the peers fail with PeerFailed naming the rank") {
  const int world = 3, culprit = 1;
  LoopbackNetwork net(small_pieces());
  std::vector<std::shared_ptr<Communicator>> comms(world);
  for (int r = 0; r < world; ++r) {
    CommOptions o = options(r, world, 2);
    if (r == culprit) {
      o.on_chunk = [&](const ChunkEvent& e) {
        if (e.chunks_done == 2) comms[culprit]->abort_failed("test: rank 1 fences itself");
      };
    }
    comms[r] = net.connect(o);
  }
  std::vector<Outcome> out(world);
  spawn(world, [&](int rank) {
    std::vector<float> v(3000, 1.0f);
    out[rank] = outcome_of([&] { comms[rank]->allreduce_start(f32(v), {7, 0})->wait(Clock::now() + kBound); });
  });
  CHECK(out[culprit].kind == "Aborted");
  CHECK(contains(out[culprit].what, "test: rank 1 fences itself"));
  for (int r : {0, 2}) {
    CAPTURE(out[r].what);
    CHECK(out[r].kind == "PeerFailed");
    CHECK(out[r].peer == culprit);
    CHECK(contains(out[r].what, "rank 1 aborted: test: rank 1 fences itself"));
  }
}

TEST_CASE("loopback communicator: inject_drop from the chunk hook fails every rank with PeerFailed naming it") {
  const int world = 3, dropped = 2;
  LoopbackNetwork net(small_pieces());
  std::vector<std::shared_ptr<Communicator>> comms(world);
  for (int r = 0; r < world; ++r) {
    CommOptions o = options(r, world, 3);
    if (r == dropped) {
      o.on_chunk = [&](const ChunkEvent& e) {
        if (e.chunks_done == 3) comms[dropped]->inject_drop();
      };
    }
    comms[r] = net.connect(o);
  }
  std::vector<Outcome> out(world);
  spawn(world, [&](int rank) {
    std::vector<float> v(3000, 1.0f);
    out[rank] = outcome_of([&] { comms[rank]->allreduce(f32(v), {8, 0}); });
  });
  for (int r = 0; r < world; ++r) {
    CAPTURE(r);
    CAPTURE(out[r].what);
    CHECK(out[r].kind == "PeerFailed");
    CHECK(out[r].peer == dropped);
  }
}

TEST_CASE("loopback communicator: a killed rank fails its peers with PeerFailed naming it") {
  const int world = 3;
  LoopbackNetwork net;
  std::vector<std::shared_ptr<Communicator>> comms(world);
  for (int r = 0; r < world; ++r) comms[r] = net.connect(options(r, world, 4));
  std::vector<Outcome> out(world);
  spawn(world, [&](int rank) {
    std::vector<float> v(16, 1.0f);
    if (rank == 1) {  // the process dies before it calls
      net.kill_everywhere(1);
      return;
    }
    out[rank] = outcome_of([&] { comms[rank]->allreduce(f32(v), {1, 0}); });
  });
  for (int r : {0, 2}) {
    CAPTURE(out[r].what);
    CHECK(out[r].kind == "PeerFailed");
    CHECK(out[r].peer == 1);
  }
}

TEST_CASE("loopback communicator: a rank that never calls fails the other with TimedOut after the stall timeout") {
  LoopbackNetwork net;
  auto c0 = net.connect(options(0, 2, 1));
  auto c1 = net.connect(options(1, 2, 1));  // connected, never calls
  c0->set_stall_timeout(std::chrono::milliseconds(100));
  CHECK(c0->stall_timeout() == std::chrono::milliseconds(100));
  std::vector<float> v(8, 1.0f);
  const Outcome o = outcome_of([&] { c0->allreduce_start(f32(v), {3, 0})->wait(Clock::now() + kBound); });
  CAPTURE(o.what);
  CHECK(o.kind == "TimedOut");
  CHECK(o.peer == 1);
  CHECK(o.ms >= 100);
  CHECK(o.ms < 1000);
  // Poisoned: the next call fails at once with the same error.
  const Outcome next = outcome_of([&] { c0->barrier({4, 0}); });
  CHECK(next.kind == "TimedOut");
  CHECK(next.ms < 50);
}
