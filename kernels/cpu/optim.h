#pragma once
// Optimizer updates over flat buffers, with PyTorch's exact semantics (torch.optim.SGD and
// torch.optim.AdamW, single-tensor path): same order of operations, same float rounding of
// the scalar factors. The CPU op table's sgd_step and adamw_step entries (table.h).
#include <cstdint>

#include "kernels/geometry.h"

namespace rf::kernels::cpu {

using kernels::AdamWConfig;  // kernels/geometry.h
using kernels::SgdConfig;

// first_step: PyTorch sets the momentum buffer to the (decayed) gradient on the first step
// instead of blending it into zeros. momentum_buf may be null when momentum == 0.
void sgd_step(const SgdConfig& c, int64_t n, float* param, const float* grad,
              float* momentum_buf, bool first_step);

// step is the 1-based step count AFTER incrementing (as in PyTorch).
void adamw_step(const AdamWConfig& c, int64_t n, float* param, const float* grad, float* exp_avg,
                float* exp_avg_sq, int64_t step);

}  // namespace rf::kernels::cpu
