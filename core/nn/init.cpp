#include "core/nn/init.h"

#include <cmath>

#include "base/error.h"
#include "base/str.h"

namespace rf::nn {

float kaiming_uniform_bound(int64_t fan_in) {
  if (fan_in <= 0) throw InvalidInput(str("init: fan_in must be positive, got ", fan_in));
  const double a = std::sqrt(5.0);
  const double gain = std::sqrt(2.0 / (1.0 + a * a));
  return static_cast<float>(gain * std::sqrt(3.0 / static_cast<double>(fan_in)));
}

void uniform_(Tensor& t, float lo, float hi, Generator& gen) {
  float* p = t.data();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = gen.uniform(lo, hi);
}

}  // namespace rf::nn
