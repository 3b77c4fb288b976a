#include "ddp/fixed_point.h"

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
  float m = 0.0f;
  bool finite = true;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    finite &= std::isfinite(a);
    m = a > m ? a : m;
  }
  return finite ? m : std::numeric_limits<float>::infinity();
}

void add_fixed(const float* x, int64_t n, int shift, int64_t* acc) {
  // 2^shift is exact in double for every shift fixed_shift makes (|shift| < 220), and so is
  // x * 2^shift (a float's 24 bits, |value| < 2^62): the only rounding is nearbyint's, to
  // nearest, ties to even (the default rounding mode, which nothing here changes).
  const double scale = std::ldexp(1.0, shift);
  for (int64_t i = 0; i < n; ++i) acc[i] += static_cast<int64_t>(std::nearbyint(static_cast<double>(x[i]) * scale));
}

void round_fixed(const int64_t* acc, int64_t n, int shift, double divisor, float* out) {
  const double unscale = std::ldexp(1.0, -shift);
  for (int64_t i = 0; i < n; ++i)
    out[i] = static_cast<float>(static_cast<double>(acc[i]) * unscale / divisor);
}

}  // namespace rf::ddp::exact
