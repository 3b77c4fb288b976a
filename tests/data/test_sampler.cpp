#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "base/error.h"
#include "core/data/prng.h"
#include "core/data/sampler.h"

using rf::data::Sampler;

TEST_CASE("partition covers the batch exactly, in contiguous rank order, for many (B, W)") {
  for (int64_t b = 0; b <= 70; ++b) {
    for (int w = 1; w <= 80; ++w) {
      int64_t expect_begin = 0;
      for (int r = 0; r < w; ++r) {
        const auto [begin, end] = Sampler::partition(b, r, w);
        REQUIRE(begin == expect_begin);  // contiguous and disjoint: each starts where the last ended
        REQUIRE(end >= begin);
        const int64_t size = end - begin;
        // The first B % W ranks get one extra sample; W > B leaves some ranks empty.
        REQUIRE(size == b / w + (r < b % w ? 1 : 0));
        expect_begin = end;
      }
      REQUIRE(expect_begin == b);  // together they cover [0, B)
    }
  }
  CHECK(Sampler::partition(128, 0, 3) == std::pair<int64_t, int64_t>{0, 43});
  CHECK(Sampler::partition(128, 1, 3) == std::pair<int64_t, int64_t>{43, 86});
  CHECK(Sampler::partition(128, 2, 3) == std::pair<int64_t, int64_t>{86, 128});
  CHECK(Sampler::partition(2, 3, 5) == std::pair<int64_t, int64_t>{2, 2});
}

TEST_CASE("partition rejects impossible ranks and world sizes") {
  CHECK_THROWS_AS(Sampler::partition(10, 0, 0), rf::InvalidInput);
  CHECK_THROWS_AS(Sampler::partition(10, 3, 3), rf::InvalidInput);
  CHECK_THROWS_AS(Sampler::partition(10, -1, 3), rf::InvalidInput);
  CHECK_THROWS_AS(Sampler::partition(-1, 0, 3), rf::InvalidInput);
}

TEST_CASE("each epoch's batches are a permutation of the dataset, last batch short") {
  const int64_t n = 1000, b = 96;
  Sampler s(n, b, 42);
  REQUIRE(s.steps_per_epoch() == 11);  // ceil(1000 / 96)
  std::vector<int64_t> first_epoch;
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::vector<int64_t> all;
    for (int64_t pos = 0; pos < s.steps_per_epoch(); ++pos) {
      auto batch = s.global_batch(epoch * s.steps_per_epoch() + pos);
      CHECK(static_cast<int64_t>(batch.size()) == (pos == 10 ? 1000 - 10 * 96 : 96));
      all.insert(all.end(), batch.begin(), batch.end());
    }
    std::vector<int64_t> sorted = all;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> iota(n);
    std::iota(iota.begin(), iota.end(), 0);
    CHECK(sorted == iota);
    CHECK(all != iota);  // actually shuffled
    if (epoch == 0) first_epoch = all;
    else CHECK(all != first_epoch);  // every epoch has its own order
  }
}

TEST_CASE("drop_last drops the short batch") {
  Sampler s(1000, 96, 1, /*drop_last=*/true);
  CHECK(s.steps_per_epoch() == 10);
  for (int64_t step = 0; step < 25; ++step) CHECK(s.global_batch(step).size() == 96);
  CHECK_THROWS_AS(Sampler(10, 11, 0, true), rf::InvalidInput);
  CHECK_THROWS_AS(Sampler(0, 1, 0), rf::InvalidInput);
  CHECK_THROWS_AS(Sampler(10, 0, 0), rf::InvalidInput);
}

TEST_CASE("the global batch of a step is a pure function of (seed, step)") {
  Sampler a(60000, 128, 0), b(60000, 128, 0), other(60000, 128, 1);
  // Visit steps in different orders (the cache must not change the answer).
  const std::vector<int64_t> steps = {0, 1, 468, 469, 937, 5, 470, 0, 1000};
  std::vector<std::vector<int64_t>> from_a;
  for (int64_t s : steps) from_a.push_back(a.global_batch(s));
  for (size_t i = steps.size(); i-- > 0;) CHECK(b.global_batch(steps[i]) == from_a[i]);
  CHECK(other.global_batch(0) != a.global_batch(0));
  CHECK(a.global_batch(0) != a.global_batch(1));
  CHECK(a.global_batch(468).size() == 60000 - 468 * 128);  // the short last batch of epoch 0
  CHECK_THROWS_AS(a.global_batch(-1), rf::InvalidInput);
}

TEST_CASE("local batches of all ranks concatenate to the global batch") {
  Sampler s(500, 37, 9);
  for (int64_t step : {0, 5, 13, 14}) {
    const auto global = s.global_batch(step);
    for (int w : {1, 2, 3, 4, 7, 37, 50}) {
      std::vector<int64_t> joined;
      for (int r = 0; r < w; ++r) {
        auto local = s.local_batch(step, r, w);
        joined.insert(joined.end(), local.begin(), local.end());
      }
      CHECK(joined == global);
    }
  }
}

TEST_CASE("SplitMix64: below() stays in range and hits every value") {
  rf::data::SplitMix64 g(123);
  for (uint64_t bound : {1ULL, 2ULL, 3ULL, 7ULL, 1000ULL}) {
    std::set<uint64_t> seen;
    for (int i = 0; i < 30000; ++i) {  // e^-30 chance to miss a value of 1000
      const uint64_t v = g.below(bound);
      REQUIRE(v < bound);
      seen.insert(v);
    }
    CHECK(seen.size() == bound);
  }
  for (int i = 0; i < 1000; ++i) {
    const float u = g.uniform01();
    REQUIRE(u >= 0.0f);
    REQUIRE(u < 1.0f);
  }
  // Reference values of SplitMix64 (Vigna's splitmix64.c) from state 0.
  rf::data::SplitMix64 ref(0);
  CHECK(ref.next() == 0xE220A8397B1DCDAFULL);
  CHECK(ref.next() == 0x6E789E6AA1B965F4ULL);
}
