#include "kernels/cpu/softmax.h"

#include <cmath>

namespace rf::kernels::cpu {

void log_softmax(int64_t rows, int64_t cols, const float* x, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float m = xr[0];
    for (int64_t c = 1; c < cols; ++c) m = xr[c] > m ? xr[c] : m;
    float s = 0.0f;
    for (int64_t c = 0; c < cols; ++c) s += std::exp(xr[c] - m);
    const float lse = m + std::log(s);
    for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c] - lse;
  }
}

void log_softmax_backward(int64_t rows, int64_t cols, const float* y, const float* dy,
                          float* dx, bool accumulate) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* yr = y + r * cols;
    const float* dyr = dy + r * cols;
    float* dxr = dx + r * cols;
    float s = 0.0f;
    for (int64_t c = 0; c < cols; ++c) s += dyr[c];
    if (accumulate)
      for (int64_t c = 0; c < cols; ++c) dxr[c] += dyr[c] - std::exp(yr[c]) * s;
    else
      for (int64_t c = 0; c < cols; ++c) dxr[c] = dyr[c] - std::exp(yr[c]) * s;
  }
}

float nll_sum(int64_t rows, int64_t cols, const float* logp, const int32_t* labels) {
  double s = 0.0;
  for (int64_t r = 0; r < rows; ++r) s -= logp[r * cols + labels[r]];
  return static_cast<float>(s);
}

void nll_backward(int64_t rows, int64_t cols, const int32_t* labels, float scale, float* dlogp) {
  for (int64_t r = 0; r < rows; ++r) dlogp[r * cols + labels[r]] -= scale;
}

}  // namespace rf::kernels::cpu
