#pragma once
// Paired A/B statistics of the overlap within one job (ddp_bench --variants ab): the
// Trainer runs overlap on for k steps, off for k, ... (ddp::overlap_ab_on), and every
// step's wall time is tagged with the setting it ran with. Noise on this machine moves
// whole stretches of steps (another process's compile starts, a core is taken away), so
// the statistic compares ADJACENT blocks: each pair is an on-block and the off-block right
// after it (or before it: the other pairing, to see whether the order biases anything),
// each block summarised by its median step time (robust to one descheduled step).
// Per pair: gain = off / on - 1 (> 0: overlap faster). Reported: its median, a
// distribution-free 95 % interval of that median (order statistics, from the sign test),
// how many pairs had on faster, and the two-sided sign-test p-value of "no difference".
// Pure functions, unit-tested in tests/ddp/test_ab_stats.cpp.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace rf::bench {

struct StepSample {
  int64_t step = 0;
  bool overlap = false;
  double ms = 0;  // wall time of this step
};

struct AbPair {
  double on_ms = 0, off_ms = 0;  // block medians
  double gain_pct() const { return 100.0 * (off_ms / on_ms - 1.0); }
  double diff_ms() const { return off_ms - on_ms; }
};

inline double median_of(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// P(X <= x) for X ~ Binomial(n, 1/2), in logs so that n in the thousands is fine.
inline double binom_half_cdf(size_t x, size_t n) {
  double p = 0;
  for (size_t i = 0; i <= x && i <= n; ++i)
    p += std::exp(std::lgamma(n + 1.0) - std::lgamma(i + 1.0) - std::lgamma(n - i + 1.0) - n * std::log(2.0));
  return std::min(1.0, p);
}

// Two-sided sign test: `wins` of `n` untied pairs went one way; p of a split at least as
// lopsided under "either way is equally likely".
inline double sign_test_p(size_t wins, size_t n) {
  if (n == 0) return 1.0;
  const size_t lo = std::min(wins, n - wins);
  return std::min(1.0, 2.0 * binom_half_cdf(lo, n));
}

// Pairs of adjacent complete blocks of `period` steps (block j = step / period; blocks
// with a missing step — the warm-up — are skipped). on_first: (on-block j, off-block j+1);
// otherwise (off-block j, on-block j+1). Blocks of one job only: call once per job.
inline std::vector<AbPair> ab_pairs(const std::vector<StepSample>& steps, int64_t period, bool on_first) {
  std::map<int64_t, std::vector<double>> blocks;
  std::map<int64_t, bool> block_on;
  for (const StepSample& s : steps) {
    blocks[s.step / period].push_back(s.ms);
    block_on[s.step / period] = s.overlap;
  }
  std::vector<AbPair> out;
  for (const auto& [j, ms] : blocks) {
    if (block_on[j] != on_first || static_cast<int64_t>(ms.size()) != period) continue;
    auto next = blocks.find(j + 1);
    if (next == blocks.end() || static_cast<int64_t>(next->second.size()) != period || block_on[j + 1] == on_first)
      continue;
    const double a = median_of(ms), b = median_of(next->second);
    out.push_back(on_first ? AbPair{a, b} : AbPair{b, a});
  }
  return out;
}

struct AbSummary {
  size_t pairs = 0, on_faster = 0, ties = 0;
  // 95 % interval of the median; in % (gain_pct) or, with in_ms, in ms (diff_ms)
  double median_gain_pct = 0, ci_lo_pct = 0, ci_hi_pct = 0;
  double sign_p = 1.0;
};

inline AbSummary summarize_pairs(const std::vector<AbPair>& pairs, bool in_ms = false) {
  AbSummary r;
  r.pairs = pairs.size();
  std::vector<double> g;
  for (const AbPair& p : pairs) {
    g.push_back(in_ms ? p.diff_ms() : p.gain_pct());
    if (p.on_ms < p.off_ms) ++r.on_faster;
    else if (p.on_ms == p.off_ms) ++r.ties;
  }
  r.median_gain_pct = median_of(g);
  r.sign_p = sign_test_p(r.on_faster, r.pairs - r.ties);
  // The median lies in [g_(l), g_(n+1-l)] (1-based order statistics) with confidence
  // 1 - 2 P(X < l): the largest l with P(X <= l-1) <= 0.025.
  std::sort(g.begin(), g.end());
  const size_t n = g.size();
  size_t l = 0;
  while (l + 1 <= n && binom_half_cdf(l, n) <= 0.025) ++l;  // P(X <= l) <= 0.025 -> l+1 usable
  if (l >= 1 && l <= n + 1 - l) {
    r.ci_lo_pct = g[l - 1];
    r.ci_hi_pct = g[n - l];
  } else if (n > 0) {  // too few pairs for a 95 % interval: the whole range
    r.ci_lo_pct = g.front();
    r.ci_hi_pct = g.back();
  }
  return r;
}

}  // namespace rf::bench
