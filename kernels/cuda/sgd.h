#pragma once
// SGD with momentum on device buffers — the same update as the CPU optimizer (PyTorch's
// convention: buf = momentum*buf + (1-dampening)*g; p -= lr*buf), so the CPU version is
// its oracle. Launchers take their stream and check the launch at once.
#include <cstddef>

#include <cuda_runtime.h>

namespace rf::cuda {

struct SgdParams {
  float lr = 0.05f;
  float momentum = 0.0f;
  float dampening = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;
  bool first_step = true;  // PyTorch initialises the momentum buffer with g on step one
};

void sgd_step(float* param, const float* grad, float* momentum_buf, size_t n, const SgdParams& p,
              cudaStream_t stream);

}  // namespace rf::cuda
