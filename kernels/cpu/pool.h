#pragma once
// 2-D max pooling over NCHW planes, no padding. The forward records, for each output, the
// index of the winning input inside its plane; backward routes the gradient there.
// Ties go to the first element in scan order, as in PyTorch's CPU kernel.
#include <cstdint>

#include "kernels/geometry.h"

namespace rf::kernels::cpu {

using kernels::PoolGeometry;  // kernels/geometry.h

void max_pool2d(const PoolGeometry& g, const float* x, float* out, int32_t* argmax);
// dx[argmax] += dout; accumulate=false first zeroes each plane (just before its scatter,
// while it is in cache) instead of the caller zeroing the whole gradient in a pass.
void max_pool2d_backward(const PoolGeometry& g, const float* dout, const int32_t* argmax,
                         float* dx, bool accumulate);

}  // namespace rf::kernels::cpu
