// The paired A/B statistics of ddp_bench --variants ab (bench/ddp/ab_stats.h): pairing of
// adjacent blocks, the sign test and the median's order-statistic interval, against values
// worked out by hand.
#include <doctest/doctest.h>

#include <vector>

#include "bench/ddp/ab_stats.h"
#include "ddp/reducer.h"

using namespace rf::bench;

TEST_CASE("sign test and binomial tail, by hand") {
  CHECK(binom_half_cdf(2, 4) == doctest::Approx(11.0 / 16));
  CHECK(binom_half_cdf(4, 4) == doctest::Approx(1.0));
  CHECK(sign_test_p(0, 10) == doctest::Approx(2.0 / 1024));
  CHECK(sign_test_p(10, 10) == doctest::Approx(2.0 / 1024));
  CHECK(sign_test_p(1, 10) == doctest::Approx(22.0 / 1024));
  CHECK(sign_test_p(5, 10) == 1.0);
  CHECK(sign_test_p(0, 0) == 1.0);
}

TEST_CASE("adjacent on/off blocks pair up; incomplete blocks are skipped") {
  // period 2, steps 3..13 (the warm-up dropped 0..2): block 1 has only step 3.
  std::vector<StepSample> steps;
  for (int64_t s = 3; s <= 13; ++s) {
    const bool on = rf::ddp::overlap_ab_on(s, 2);
    steps.push_back({s, on, on ? 10.0 : 11.0});
  }
  const auto on_first = ab_pairs(steps, 2, true);  // (2,3), (4,5); block 6 has no block 7
  REQUIRE(on_first.size() == 2);
  for (const AbPair& p : on_first) {
    CHECK(p.on_ms == 10.0);
    CHECK(p.off_ms == 11.0);
    CHECK(p.gain_pct() == doctest::Approx(10.0));
  }
  const auto off_first = ab_pairs(steps, 2, false);  // (3,4), (5,6)
  CHECK(off_first.size() == 2);
  const AbSummary a = summarize_pairs(on_first);
  CHECK(a.pairs == 2);
  CHECK(a.on_faster == 2);
  CHECK(a.sign_p == doctest::Approx(0.5));
}

TEST_CASE("the median's 95 % interval from order statistics") {
  // 20 pairs with gains 1 .. 20 %: P(X <= 5) = 0.0207 <= 0.025 < P(X <= 6) = 0.0577 for
  // Binomial(20, 1/2), so the interval is [g_(6), g_(15)] = [6, 15].
  std::vector<AbPair> pairs;
  for (int i = 20; i >= 1; --i) pairs.push_back({100.0, 100.0 + i});
  const AbSummary a = summarize_pairs(pairs);
  CHECK(a.median_gain_pct == doctest::Approx(10.5));
  CHECK(a.ci_lo_pct == doctest::Approx(6.0));
  CHECK(a.ci_hi_pct == doctest::Approx(15.0));
  CHECK(a.on_faster == 20);
  // Too few pairs for 95 %: the whole range.
  const AbSummary b = summarize_pairs({{100.0, 99.0}, {100.0, 102.0}, {100.0, 101.0}});
  CHECK(b.ci_lo_pct == doctest::Approx(-1.0));
  CHECK(b.ci_hi_pct == doctest::Approx(2.0));
  CHECK(b.on_faster == 2);
  CHECK(b.sign_p == 1.0);
}
