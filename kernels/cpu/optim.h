#pragma once
// Optimizer updates over flat buffers, with PyTorch's exact semantics (torch.optim.SGD and
// torch.optim.AdamW, single-tensor path): same order of operations, same float rounding of
// the scalar factors. The CUDA kernels use these as their oracle.
#include <cstdint>

namespace rf::kernels::cpu {

struct SgdConfig {
  float lr = 0.01f, momentum = 0.0f, dampening = 0.0f, weight_decay = 0.0f;
  bool nesterov = false;
};
// first_step: PyTorch sets the momentum buffer to the (decayed) gradient on the first step
// instead of blending it into zeros. momentum_buf may be null when momentum == 0.
void sgd_step(const SgdConfig& c, int64_t n, float* param, const float* grad,
              float* momentum_buf, bool first_step);

struct AdamWConfig {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 1e-2f;
};
// step is the 1-based step count AFTER incrementing (as in PyTorch).
void adamw_step(const AdamWConfig& c, int64_t n, float* param, const float* grad, float* exp_avg,
                float* exp_avg_sq, int64_t step);

}  // namespace rf::kernels::cpu
