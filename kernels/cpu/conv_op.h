#pragma once
// The CPU table's conv2d entries (table.cpp): whole batched convolutions built from the
// per-sample kernels of conv.h, conv_direct.h and gemm.h. Internal to kernels/cpu.
#include "kernels/exec.h"
#include "kernels/geometry.h"

namespace rf::kernels::cpu {

void conv2d_forward(const Exec& e, const ConvShape& s, const float* x, const float* w, const float* bias,
                    float* out);
void conv2d_backward(const Exec& e, const ConvShape& s, const float* x, const float* w, const float* g,
                     float* dx, bool accumulate_dx, float* dw, float* dbias);

}  // namespace rf::kernels::cpu
