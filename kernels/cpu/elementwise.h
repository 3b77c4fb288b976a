#pragma once
// Elementwise kernels and the bias broadcast. Every backward kernel ACCUMULATES into its
// output gradient (+=): a tensor used twice gets the sum of both contributions.
#include <cstdint>

namespace rf::kernels::cpu {

void fill(float* x, int64_t n, float value);
// y += a * x
void axpy(int64_t n, float a, const float* x, float* y);
void copy(int64_t n, const float* x, float* y);  // y = x
// out = a + b
void add(int64_t n, const float* a, const float* b, float* out);
// dst[c, r] = src[r, c] for a (rows x cols) src; dst is (cols x rows).
void transpose(int64_t rows, int64_t cols, const float* src, float* dst);
// dst[r, c] += src[c, r] for a (rows x cols) dst; src is (cols x rows).
void add_transposed(int64_t rows, int64_t cols, const float* src, float* dst);

// out[r, c] = x[r, c] + bias[c % cols] for a (rows x cols) x. With cols = C*H*W and
// a per-channel bias of C, use add_channel_bias instead.
void add_row_bias(int64_t rows, int64_t cols, const float* x, const float* bias, float* out);
// dbias[c] += sum_r dout[r, c]
void add_row_bias_backward(int64_t rows, int64_t cols, const float* dout, float* dbias);
// NCHW: out[n, c, i] = x[n, c, i] + bias[c], i over the spatial plane of size plane.
void add_channel_bias(int64_t n, int64_t c, int64_t plane, const float* x, const float* bias,
                      float* out);
void add_channel_bias_backward(int64_t n, int64_t c, int64_t plane, const float* dout,
                               float* dbias);

void relu(int64_t n, const float* x, float* out);
// dx (+)= dout where out > 0 (PyTorch's rule: the gradient at 0 is 0). accumulate=false
// overwrites dx: the autograd engine's "first writer" case (see core/autograd.h).
void relu_backward(int64_t n, const float* out, const float* dout, float* dx, bool accumulate);

}  // namespace rf::kernels::cpu
