#include "base/error.h"
#include "base/str.h"
#include "core/data/dataset.h"
#include "core/data/prng.h"

namespace rf::data {

// Each class k has a fixed pattern of +-1 values drawn from (seed, k); a sample of class k
// is 0.8 * pattern_k + uniform noise in [-1, 1). Classes are then separable by a linear
// model but not trivially (the noise is larger than the signal per pixel), so a few
// steps of training visibly reduce the loss.
Dataset make_synthetic(int64_t n, int64_t c, int64_t h, int64_t w, int num_classes, uint64_t seed) {
  if (n < 1 || c < 1 || h < 1 || w < 1 || num_classes < 1) {
    throw rf::InvalidInput(rf::str("make_synthetic: n, c, h, w and num_classes must be >= 1, got n=", n, " c=", c,
                                   " h=", h, " w=", w, " num_classes=", num_classes));
  }
  Dataset ds;
  ds.n = n;
  ds.c = c;
  ds.h = h;
  ds.w = w;
  ds.num_classes = num_classes;
  const int64_t d = c * h * w;
  std::vector<float> patterns(static_cast<size_t>(num_classes * d));
  for (int k = 0; k < num_classes; ++k) {
    SplitMix64 g = substream(seed, 0x1000 + static_cast<uint64_t>(k));
    for (int64_t j = 0; j < d; ++j) patterns[static_cast<size_t>(k * d + j)] = (g.next() >> 63) ? 1.0f : -1.0f;
  }
  ds.images.resize(static_cast<size_t>(n * d));
  ds.labels.resize(static_cast<size_t>(n));
  SplitMix64 g = substream(seed, 0x2000);
  for (int64_t i = 0; i < n; ++i) {
    const int k = static_cast<int>(g.below(static_cast<uint64_t>(num_classes)));
    ds.labels[static_cast<size_t>(i)] = k;
    float* x = ds.images.data() + i * d;
    const float* p = patterns.data() + static_cast<int64_t>(k) * d;
    for (int64_t j = 0; j < d; ++j) x[j] = 0.8f * p[j] + (2.0f * g.uniform01() - 1.0f);
  }
  return ds;
}

}  // namespace rf::data
