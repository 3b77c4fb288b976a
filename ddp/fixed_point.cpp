#include "ddp/fixed_point.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "base/enforce.h"

namespace rf::ddp::exact {

int headroom_bits(int64_t addends) {
  RF_ENFORCE(addends >= 1, "a sum of ", addends, " addends");
  int h = 0;
  while ((int64_t{1} << h) < addends) ++h;
  return h;
}

int fixed_shift(float max_abs, int64_t addends) {
  RF_ENFORCE(std::isfinite(max_abs) && max_abs >= 0.0f, "fixed_shift of ", max_abs);
  if (max_abs == 0.0f) return 0;
  int e = 0;
  (void)std::frexp(max_abs, &e);  // max_abs = f * 2^e, f in [0.5, 1): max_abs < 2^e
  return 62 - headroom_bits(addends) - e;
}

float max_abs(const float* x, int64_t n) {
  // On the bits: without the sign, finite floats order as their bit patterns, and infinity
  // and every NaN lie above the largest finite one. An integer maximum (vectorised) finds
  // both the largest |x| and whether anything is not finite.
  uint32_t m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::bit_cast<uint32_t>(x[i]) & 0x7fffffffu);
  const float largest = std::bit_cast<float>(m);
  return std::isfinite(largest) ? largest : std::numeric_limits<float>::infinity();
}

void add_fixed(const float* x, int64_t n, int shift, int64_t* acc) {
  // 2^shift is exact in double for every shift fixed_shift makes (|shift| < 220), and so is
  // x * 2^shift (a float's 24 bits, |value| < 2^62): the only rounding is rint's, to
  // nearest, ties to even (the default rounding mode, which nothing here changes).
  const double scale = std::ldexp(1.0, shift);
  for (int64_t i = 0; i < n; ++i) acc[i] += static_cast<int64_t>(std::rint(static_cast<double>(x[i]) * scale));
}

void round_fixed(const int64_t* acc, int64_t n, int shift, double divisor, float* out) {
  const double unscale = std::ldexp(1.0, -shift);
  for (int64_t i = 0; i < n; ++i)
    out[i] = static_cast<float>(static_cast<double>(acc[i]) * unscale / divisor);
}

}  // namespace rf::ddp::exact
