#pragma once
// host_view — a tensor's values as host memory, for code that reads them on the host (a
// digest, a checkpoint image). A CPU tensor's own data, no copy; any other device's is
// read into `scratch` (a blocking read, counted by the device's runtime, so never on the
// step path). The span is valid while the tensor and `scratch` are unchanged.
#include <span>
#include <vector>

#include "core/device_runtime.h"
#include "core/tensor.h"

namespace rf {

inline std::span<const float> host_view(const Tensor& t, std::vector<float>& scratch) {
  const size_t n = static_cast<size_t>(t.numel());
  if (t.device().is_cpu()) return {t.data(), n};
  scratch.resize(n);
  if (n > 0) runtime(t.device(), "host_view").read(scratch.data(), t.data(), sizeof(float) * n);
  return {scratch.data(), n};
}

}  // namespace rf
