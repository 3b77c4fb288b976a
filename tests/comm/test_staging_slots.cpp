// StagingSlots: the UCX fallback's choice of pinned staging for device collectives
// (comm/staging/staging_slots.h), without CUDA.
#include <doctest/doctest.h>

#include "comm/staging/staging_slots.h"

using rf::comm::cuda::staging_capacity;
using rf::comm::cuda::StagingKey;
using rf::comm::cuda::StagingSlots;

namespace {
constexpr size_t kKiB = 1024;
constexpr size_t kBig = size_t{1} << 40;  // a budget nothing reaches
}  // namespace

TEST_CASE("staging capacity: whole 64 KiB, never 0") {
  CHECK(staging_capacity(0) == 64 * kKiB);
  CHECK(staging_capacity(1) == 64 * kKiB);
  CHECK(staging_capacity(64 * kKiB) == 64 * kKiB);
  CHECK(staging_capacity(64 * kKiB + 1) == 128 * kKiB);
}

TEST_CASE("staging slots: a bucket finds its own slot every step, whatever the timing") {
  StagingSlots s(kBig);
  const StagingKey b0{0, 0x1000, 100 * kKiB}, b1{0, 0x900000, 100 * kKiB}, b2{0, 0x2000000, 4 * kKiB};
  // Step 1: bucket 0 finishes before bucket 1 starts; nothing may be shared between them.
  auto p = s.take(b0);
  REQUIRE(p.slot == -1);
  const int s0 = s.add(b0);
  s.give(s0);
  REQUIRE(s.take(b1).slot == -1);
  const int s1 = s.add(b1);
  REQUIRE(s.take(b2).slot == -1);
  const int s2 = s.add(b2);
  CHECK(s0 != s1);
  CHECK(s1 != s2);
  s.give(s1);
  s.give(s2);
  // Steps 2..: all outstanding at once, or one after the other: the same slots, no new one.
  for (int step = 0; step < 3; ++step) {
    auto q0 = s.take(b0), q1 = s.take(b1), q2 = s.take(b2);
    CHECK(q0.slot == s0);
    CHECK(q1.slot == s1);
    CHECK(q2.slot == s2);
    CHECK(q0.evict.empty());
    s.give(s2);
    s.give(s0);
    s.give(s1);
  }
  CHECK(s.live_slots() == 3);
  CHECK(s.live_bytes() == 2 * 128 * kKiB + 64 * kKiB);
}

TEST_CASE("staging slots: a key in use gets a second slot; the key includes device and size") {
  StagingSlots s(kBig);
  const StagingKey k{0, 0x1000, 8};
  REQUIRE(s.take(k).slot == -1);
  const int a = s.add(k);
  REQUIRE(s.take(k).slot == -1);  // a is taken
  const int b = s.add(k);
  CHECK(a != b);
  s.give(a);
  CHECK(s.take(StagingKey{1, 0x1000, 8}).slot == -1);        // another GPU
  CHECK(s.take(StagingKey{0, 0x1000, 16}).slot == -1);       // another size
  CHECK(s.take(k).slot == a);
  CHECK(s.taken(a));
  CHECK_THROWS(s.give(-1));
  s.give(a);
  CHECK_THROWS(s.give(a));
}

TEST_CASE("staging slots: over budget, free slots go least recently used first; taken ones never") {
  StagingSlots s(256 * kKiB);
  const StagingKey a{0, 1, 64 * kKiB}, b{0, 2, 64 * kKiB}, c{0, 3, 64 * kKiB}, d{0, 4, 64 * kKiB};
  int sa = (s.take(a), s.add(a)), sb = (s.take(b), s.add(b)), sc = (s.take(c), s.add(c));
  s.give(sb);
  s.give(sa);  // b was used before a (both free); c stays taken
  REQUIRE(s.take(b).slot == sb);
  s.give(sb);  // now a is the least recently used free slot
  auto p = s.take(d);  // 3 x 64 + 64 = 256 KiB: fits, nothing evicted
  CHECK(p.evict.empty());
  const int sd = s.add(d);
  const StagingKey e{0, 5, 128 * kKiB};
  p = s.take(e);  // 256 + 128 > 256: evict a, then b (c and d are taken)
  REQUIRE(p.slot == -1);
  CHECK(p.evict == std::vector<int>{sa, sb});
  const int se = s.add(e);
  CHECK((se == sa || se == sb));  // an evicted index is reused
  CHECK(s.live_bytes() == 256 * kKiB);
  // Everything taken: over budget rather than wrong.
  p = s.take(StagingKey{0, 6, 64 * kKiB});
  CHECK(p.evict.empty());
  s.add(StagingKey{0, 6, 64 * kKiB});
  CHECK(s.live_bytes() == 320 * kKiB);
  CHECK(s.taken(sc));
  CHECK(s.taken(sd));
}
