// The collectives as millisecond unit tests: W ranks as threads over the loopback
// transport (tests/comm/inproc/loopback.h), each running the production algorithm.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "comm/algorithms.h"
#include "comm/errors.h"
#include "comm/tag.h"
#include "tests/comm/inproc/loopback.h"

using namespace rf::comm;
using namespace rf::comm::inproc;

namespace {

// Values of many magnitudes, so a sum taken in another order gives other bits.
float value(int rank, size_t i) {
  const int exponent = static_cast<int>((i + static_cast<size_t>(rank)) % 7) - 3;  // 1e-3 .. 1e3
  const double x = std::sin(0.7 * static_cast<double>(i) + 1.3 * rank) * std::pow(10.0, exponent);
  return static_cast<float>(x);
}

std::vector<float> input(int rank, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = value(rank, i);
    REQUIRE(std::isfinite(v[i]));
  }
  return v;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// The ring's sum of element i (ring_layout.h): segment s's chain starts at rank s and
// adds each next rank's value to the incoming partial sum, ending at rank s - 1.
std::vector<float> ring_reference(int world, size_t n) {
  std::vector<float> out(n);
  const size_t base = n / world, extra = n % world;
  size_t at = 0;
  for (int s = 0; s < world; ++s) {
    const size_t len = base + (static_cast<size_t>(s) < extra ? 1 : 0);
    for (size_t i = at; i < at + len; ++i) {
      float acc = value(s, i);
      for (int k = 1; k < world; ++k) acc = acc + value((s + k) % world, i);
      out[i] = acc;
    }
    at += len;
  }
  return out;
}

Buffer f32(std::vector<float>& v) { return Buffer{.data = v.data(), .count = v.size(), .dtype = DType::f32}; }

}  // namespace

TEST_CASE("ring all-reduce: bitwise the ring's own order of additions, on every rank") {
  for (int world = 2; world <= 5; ++world) {
    for (size_t n : {size_t{1}, size_t{3}, size_t{7}, size_t{64}, size_t{1000}, size_t{4099}}) {
      for (int flows : {1, 2}) {
        CAPTURE(world);
        CAPTURE(n);
        CAPTURE(flows);
        const std::vector<float> want = ring_reference(world, n);
        std::vector<std::vector<float>> got(world);
        Fabric fabric(world);
        spawn(world, [&](int rank) {
          got[rank] = input(rank, n);
          std::vector<float> staging(flows * 64);
          auto c = make_allreduce_ring(f32(got[rank]), {7, 1}, rank, world, staging.data(), flows, 64 * sizeof(float));
          drive(*c, fabric.endpoint(rank), {.generation = 3, .rank = rank});
        });
        for (int r = 0; r < world; ++r)
          for (size_t i = 0; i < n; ++i) REQUIRE(bits(got[r][i]) == bits(want[i]));
        for (int r = 0; r < world; ++r) CHECK(fabric.unmatched(r) == 0);
      }
    }
  }
}

TEST_CASE("recursive doubling: identical bits on every rank, the sum of every rank's values") {
  for (int world = 2; world <= 7; ++world) {
    for (size_t n : {size_t{1}, size_t{5}, size_t{300}}) {
      CAPTURE(world);
      CAPTURE(n);
      std::vector<std::vector<float>> got(world);
      Fabric fabric(world);
      spawn(world, [&](int rank) {
        got[rank] = input(rank, n);
        std::vector<float> staging(n);
        auto c = make_allreduce_recursive_doubling(f32(got[rank]), {2, 0}, rank, world, staging.data());
        drive(*c, fabric.endpoint(rank), {.rank = rank});
      });
      for (size_t i = 0; i < n; ++i) {
        double sum = 0;
        for (int r = 0; r < world; ++r) sum += value(r, i);
        for (int r = 0; r < world; ++r) REQUIRE(bits(got[r][i]) == bits(got[0][i]));
        REQUIRE(got[0][i] == doctest::Approx(sum).epsilon(1e-5).scale(1e-3));
      }
    }
  }
}

TEST_CASE("broadcast: every rank ends with the root's bytes, for every root") {
  const int world = 4;
  const size_t n = 1001;
  for (int root = 0; root < world; ++root) {
    CAPTURE(root);
    std::vector<std::vector<float>> got(world);
    Fabric fabric(world);
    spawn(world, [&](int rank) {
      got[rank] = input(rank, n);
      auto c = make_broadcast_chain(f32(got[rank]), root, {4, 2}, rank, world, 256);
      drive(*c, fabric.endpoint(rank), {.rank = rank});
    });
    const std::vector<float> want = input(root, n);
    for (int r = 0; r < world; ++r) CHECK(got[r] == want);
  }
}

TEST_CASE("all-gather: every rank ends with every rank's block in rank order") {
  const int world = 3;
  const size_t n = 17;
  std::vector<std::vector<float>> out(world);
  Fabric fabric(world);
  spawn(world, [&](int rank) {
    std::vector<float> in = input(rank, n);
    out[rank].assign(n * world, 0.0f);
    auto c = make_allgather_ring(f32(in), f32(out[rank]), {5, 0}, rank, world);
    drive(*c, fabric.endpoint(rank), {.rank = rank});
  });
  for (int r = 0; r < world; ++r)
    for (int b = 0; b < world; ++b)
      CHECK(std::vector<float>(out[r].begin() + b * n, out[r].begin() + (b + 1) * n) == input(b, n));
}

TEST_CASE("barrier: no rank leaves before every rank arrived") {
  const int world = 5;
  std::atomic<int> arrived{0};
  std::vector<int> seen(world, -1);
  Fabric fabric(world);
  spawn(world, [&](int rank) {
    if (rank == 3) std::this_thread::sleep_for(std::chrono::milliseconds(30));  // the late one
    arrived.fetch_add(1);
    auto c = make_barrier({6, 0}, rank, world);
    drive(*c, fabric.endpoint(rank), {.rank = rank});
    seen[rank] = arrived.load();
  });
  for (int r = 0; r < world; ++r) CHECK(seen[r] == world);
}

TEST_CASE("abort: a rank killed mid all-reduce fails every survivor's call with PeerFailed naming it") {
  const int world = 4, victim = 2;
  const size_t n = 1 << 14;
  Fabric fabric(world);
  std::vector<int> blamed(world, -2);
  std::atomic<int> started{0};
  spawn(world, [&](int rank) {
    std::vector<float> v = input(rank, n);
    std::vector<float> staging(64);
    auto c = make_allreduce_ring(f32(v), {9, 0}, rank, world, staging.data(), 1, 64 * sizeof(float));
    if (rank == victim) {
      // Some rounds in, then the process is gone.
      const Collective::Context ctx{&fabric.endpoint(rank), 1, rank, nullptr, nullptr};
      bool progressed = false;
      started.fetch_add(1);
      while (started.load() < world) std::this_thread::yield();
      for (int i = 0; i < 50; ++i) c->advance(ctx, progressed);
      fabric.kill(victim);
      return;
    }
    started.fetch_add(1);
    try {
      drive(*c, fabric.endpoint(rank), {.rank = rank, .stall = std::chrono::milliseconds(5000)});
      blamed[rank] = -1;  // finished: wrong
    } catch (const PeerFailed& e) {
      blamed[rank] = e.peer();
    }
  });
  for (int r = 0; r < world; ++r)
    if (r != victim) CHECK(blamed[r] == victim);
}

TEST_CASE("stall: a rank that stops making progress fails its peers with TimedOut naming what they wait on") {
  const int world = 3, stalled = 1;
  Fabric fabric(world);
  std::vector<int> waited_on(world, -2);
  std::vector<int64_t> chunk(world, -2);
  spawn(world, [&](int rank) {
    std::vector<float> v = input(rank, 300);
    std::vector<float> staging(64);
    auto c = make_allreduce_ring(f32(v), {11, 0}, rank, world, staging.data(), 1, 64 * sizeof(float));
    if (rank == stalled) return;  // alive (its endpoint stays open) but never advances
    try {
      drive(*c, fabric.endpoint(rank), {.rank = rank, .stall = std::chrono::milliseconds(50)});
    } catch (const TimedOut& e) {
      waited_on[rank] = e.peer();
      chunk[rank] = e.info().chunk;
    }
  });
  // The ring's first round: each rank receives from its left neighbour, chunk 0.
  CHECK(waited_on[2] == stalled);  // rank 2's left is the stalled rank 1
  CHECK(chunk[2] == 0);
  CHECK(waited_on[0] == 2);  // rank 0 waits on rank 2, which waits on the stalled one
}

TEST_CASE("tags: a stale generation's message is never taken by the next generation's collective") {
  const int world = 2;
  const size_t n = 9;
  Fabric fabric(world);
  std::vector<std::vector<float>> got(world);
  // Rank 0 of generation 4 sent a chunk-0 message of step 7, op 1 that nobody received.
  std::vector<float> junk(n, 1e30f);
  Transfer stale;
  fabric.endpoint(0).post_send(stale, 1, junk.data(), n * sizeof(float), StepTag{4, 7, 1, 0}.encode());
  spawn(world, [&](int rank) {
    got[rank] = input(rank, n);
    std::vector<float> staging(64);
    auto c = make_allreduce_ring(f32(got[rank]), {7, 1}, rank, world, staging.data(), 1, 64 * sizeof(float));
    drive(*c, fabric.endpoint(rank), {.generation = 5, .rank = rank});
  });
  const std::vector<float> want = ring_reference(world, n);
  for (int r = 0; r < world; ++r)
    for (size_t i = 0; i < n; ++i) CHECK(bits(got[r][i]) == bits(want[i]));
  CHECK(fabric.unmatched(1) == 1);  // still there, untouched
}
