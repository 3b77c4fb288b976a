#include "core/nn/init.h"

#include <cmath>
#include <vector>

#include "base/error.h"
#include "base/str.h"
#include "core/device_runtime.h"

namespace rf::nn {

float kaiming_uniform_bound(int64_t fan_in) {
  if (fan_in <= 0) throw InvalidInput(str("init: fan_in must be positive, got ", fan_in));
  const double a = std::sqrt(5.0);
  const double gain = std::sqrt(2.0 / (1.0 + a * a));
  return static_cast<float>(gain * std::sqrt(3.0 / static_cast<double>(fan_in)));
}

void uniform_(Tensor& t, float lo, float hi, Generator& gen) {
  // Drawn on the host in element order (the generator's sequence), then written to the
  // tensor's device.
  std::vector<float> host(static_cast<size_t>(t.numel()));
  for (float& v : host) v = gen.uniform(lo, hi);
  if (!host.empty()) runtime(t.device(), "init").write(t.data(), host.data(), sizeof(float) * host.size());
}

}  // namespace rf::nn
