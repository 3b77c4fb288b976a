#include "kernels/cpu/elementwise.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace rf::kernels::cpu {

void fill(float* x, int64_t n, float value) {
  for (int64_t i = 0; i < n; ++i) x[i] = value;
}

void axpy(int64_t n, float a, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void copy(int64_t n, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i];
}

void add(int64_t n, const float* a, const float* b, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void add_transposed(int64_t rows, int64_t cols, const float* src, float* dst) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] += src[c * rows + r];
}

void transpose(int64_t rows, int64_t cols, const float* src, float* dst) {
  int64_t r0 = 0;
#if defined(__AVX512F__)
  // 16 rows at a time: each output row's 16 floats in one gather (strided by cols) and
  // one contiguous store, instead of 16 scalar stores cols floats apart.
  if (cols <= (int64_t{1} << 26)) {
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32(static_cast<int32_t>(cols)));
    for (; r0 + 16 <= rows; r0 += 16)
      for (int64_t c = 0; c < cols; ++c)
        _mm512_storeu_ps(dst + c * rows + r0, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), 0xFFFF, idx,
                                                                        src + r0 * cols + c, 4));
  }
#endif
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t r = r0; r < rows; ++r) dst[c * rows + r] = src[r * cols + c];
}

void add_row_bias(int64_t rows, int64_t cols, const float* x, const float* bias, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* o = out + r * cols;
    for (int64_t c = 0; c < cols; ++c) o[c] = xr[c] + bias[c];
  }
}

void add_row_bias_backward(int64_t rows, int64_t cols, const float* dout, float* dbias) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* d = dout + r * cols;
    for (int64_t c = 0; c < cols; ++c) dbias[c] += d[c];
  }
}

void add_channel_bias(int64_t n, int64_t c, int64_t plane, const float* x, const float* bias,
                      float* out) {
  for (int64_t i = 0; i < n * c; ++i) {
    const float b = bias[i % c];
    const float* xp = x + i * plane;
    float* o = out + i * plane;
    for (int64_t j = 0; j < plane; ++j) o[j] = xp[j] + b;
  }
}

void add_channel_bias_backward(int64_t n, int64_t c, int64_t plane, const float* dout,
                               float* dbias) {
  // 16 independent partial sums: one running sum is bound by the add latency (a chain of
  // 784 dependent adds per plane); 16 lanes vectorise. The order is fixed, so the result
  // is deterministic.
  constexpr int64_t L = 16;
  for (int64_t i = 0; i < n * c; ++i) {
    const float* d = dout + i * plane;
    float acc[L] = {};
    int64_t j = 0;
    for (; j + L <= plane; j += L)
      for (int64_t l = 0; l < L; ++l) acc[l] += d[j + l];
    float s = 0.0f;
    for (int64_t l = 0; l < L; ++l) s += acc[l];
    for (; j < plane; ++j) s += d[j];
    dbias[i % c] += s;
  }
}

void relu(int64_t n, const float* x, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void relu_backward(int64_t n, const float* out, const float* dout, float* dx, bool accumulate) {
  if (accumulate)
    for (int64_t i = 0; i < n; ++i) dx[i] += out[i] > 0.0f ? dout[i] : 0.0f;
  else
    for (int64_t i = 0; i < n; ++i) dx[i] = out[i] > 0.0f ? dout[i] : 0.0f;
}

}  // namespace rf::kernels::cpu
