// The loopback Communicator (tests/comm/inproc/loopback_communicator.h): W ranks as
// threads, each with its own communicator of one LoopbackNetwork, through the interface
// the trainer uses. Every wait is bounded, so a regression fails instead of hanging.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <cmath>
#include <vector>

#include "base/clock.h"
#include "base/error.h"
#include "comm/errors.h"
#include "tests/comm/inproc/loopback_communicator.h"
#include "tests/comm/inproc/loopback_testing.h"

using namespace rf::comm;
using namespace rf::comm::inproc;
using namespace rf::comm::inproc::testing;

TEST_CASE("loopback communicator: outstanding all-reduces finish in start order, exact, bitwise equal on every rank") {
  const int world = 3;
  LoopbackNetwork net(small_pieces());
  // Per rank: two exact buffers (small: recursive doubling; large: the ring) and one of
  // many magnitudes, whose bits depend on the order of additions.
  const std::vector<size_t> sizes = {7, 1000, 4099, 33};
  std::vector<std::vector<std::vector<float>>> got(world, std::vector<std::vector<float>>(sizes.size()));
  spawn(world, [&](int rank) {
    auto c = net.connect(options(rank, world, 1));
    for (int round = 0; round < 2; ++round) {
      std::vector<WorkPtr> works;
      for (size_t b = 0; b < sizes.size(); ++b) {
        auto& v = got[rank][b];
        v.resize(sizes[b]);
        for (size_t i = 0; i < v.size(); ++i) {
          v[i] = b == 2 ? static_cast<float>(std::sin(0.7 * i + 1.3 * rank) * std::pow(10.0, (i + rank) % 7 - 3.0))
                        : static_cast<float>(i % 97) + 1000.0f * rank;
        }
        works.push_back(c->allreduce_start(f32(v), {static_cast<uint64_t>(round), static_cast<uint32_t>(b)}));
      }
      if (round == 0) {
        for (auto& w : works) w->wait(Clock::now() + kBound);
      } else {  // the last one done means every earlier one is done
        works.back()->wait(Clock::now() + kBound);
        for (auto& w : works) REQUIRE(w->test());
      }
    }
  });
  for (size_t b = 0; b < sizes.size(); ++b) {
    for (size_t i = 0; i < sizes[b]; ++i) {
      if (b != 2) REQUIRE(got[0][b][i] == static_cast<float>(3 * (i % 97) + 3000));
      for (int r = 1; r < world; ++r) REQUIRE(bits(got[r][b][i]) == bits(got[0][b][i]));
    }
  }
}

TEST_CASE("loopback communicator: all-gather, broadcast, barrier and point-to-point blobs") {
  const int world = 3;
  LoopbackNetwork net(small_pieces());
  std::vector<std::vector<float>> gathered(world), cast(world);
  std::vector<std::vector<int>> blob_in(world);
  spawn(world, [&](int rank) {
    auto c = net.connect(options(rank, world, 1));
    std::vector<float> in(5, static_cast<float>(rank + 1));
    gathered[rank].assign(5 * world, 0.0f);
    c->allgather(f32(in), f32(gathered[rank]), {1, 0});
    cast[rank].assign(1000, static_cast<float>(rank));
    if (rank == 1) {
      for (size_t i = 0; i < cast[rank].size(); ++i) cast[rank][i] = static_cast<float>(i);
    }
    c->broadcast(f32(cast[rank]), 1, {2, 0});
    c->barrier({3, 0});
    // A ring of blobs, both ends started before either is waited on.
    std::vector<int> out(300, rank);
    blob_in[rank].assign(300, -1);
    auto s = c->send_start((rank + 1) % world, out.data(), out.size() * sizeof(int), {4, 0});
    auto r = c->recv_start((rank + world - 1) % world, blob_in[rank].data(), blob_in[rank].size() * sizeof(int), {4, 0});
    r->wait(Clock::now() + kBound);
    s->wait(Clock::now() + kBound);
  });
  for (int r = 0; r < world; ++r) {
    for (int k = 0; k < world; ++k)
      for (int i = 0; i < 5; ++i) CHECK(gathered[r][5 * k + i] == static_cast<float>(k + 1));
    for (size_t i = 0; i < 1000; ++i) REQUIRE(cast[r][i] == static_cast<float>(i));
    CHECK(blob_in[r] == std::vector<int>(300, (r + world - 1) % world));
  }
}

TEST_CASE("loopback communicator: generations of one network are independent") {
  LoopbackNetwork net;
  auto factory = net.factory();
  // Generation 5 (W = 2) fails: rank 0 aborts.
  auto old0 = factory(options(0, 2, 5));
  auto old1 = factory(options(1, 2, 5));
  old0->abort("test: revoked");
  // Generation 6 (W = 3), the same (step, op): unaffected.
  std::vector<std::vector<float>> got(3);
  spawn(3, [&](int rank) {
    auto c = factory(options(rank, 3, 6));
    CHECK(c->generation() == 6);
    got[rank].assign(10, static_cast<float>(rank + 1));
    c->allreduce(f32(got[rank]), {1, 0});
  });
  for (int r = 0; r < 3; ++r) CHECK(got[r] == std::vector<float>(10, 6.0f));
  std::vector<float> v(10, 1.0f);
  CHECK(outcome_of([&] { old1->allreduce(f32(v), {1, 0}); }).kind == "Aborted");
}

TEST_CASE("loopback communicator: refusals and the store rendezvous") {
  LoopbackNetwork net;
  auto c = net.connect(options(0, 2, 1));
  CHECK_THROWS_AS(net.connect(options(1, 3, 1)), rf::EnforceError);  // another world
  CHECK_THROWS_AS(net.connect(options(0, 2, 1)), rf::EnforceError);  // connected twice
  CHECK_THROWS_AS(net.connect(options(2, 2, 1)), rf::InvalidInput);
  float x = 0;
  Buffer device{.data = &x, .count = 1, .dtype = DType::f32, .device = Device::cuda};
  CHECK_THROWS_AS(c->allreduce_start(device, {1, 0}), rf::InvalidInput);
  // With a store, connect waits for every rank up to connect_timeout.
  MemoryStore store;
  CommOptions lone = options(0, 2, 7);
  lone.store = &store;
  lone.connect_timeout = std::chrono::milliseconds(30);
  const Outcome o = outcome_of([&] { net.connect(lone); });
  CHECK(o.kind == "TimedOut");
  CHECK(o.peer == 1);
  std::vector<std::vector<float>> got(2);
  spawn(2, [&](int rank) {
    CommOptions co = options(rank, 2, 7);  // rank 0 again: its failed connect left no claim
    co.store = &store;
    auto cc = net.connect(co);
    got[rank].assign(3, 2.0f);
    cc->allreduce(f32(got[rank]), {1, 0});
  });
  CHECK(got[1] == std::vector<float>(3, 4.0f));
}
