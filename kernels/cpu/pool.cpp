#include "kernels/cpu/pool.h"

#include <cmath>

namespace rf::kernels::cpu {

void max_pool2d(const PoolGeometry& g, const float* x, float* out, int32_t* argmax) {
  const int64_t oh_n = g.out_h(), ow_n = g.out_w(), plane = g.height * g.width;
  for (int64_t p = 0; p < g.planes; ++p) {
    const float* in = x + p * plane;
    float* o = out + p * oh_n * ow_n;
    int32_t* a = argmax + p * oh_n * ow_n;
    for (int64_t oh = 0; oh < oh_n; ++oh) {
      for (int64_t ow = 0; ow < ow_n; ++ow) {
        int64_t best = (oh * g.stride) * g.width + ow * g.stride;
        float best_v = in[best];
        for (int64_t kh = 0; kh < g.kernel; ++kh) {
          for (int64_t kw = 0; kw < g.kernel; ++kw) {
            const int64_t idx = (oh * g.stride + kh) * g.width + ow * g.stride + kw;
            const float v = in[idx];
            if (v > best_v || std::isnan(v)) {
              best_v = v;
              best = idx;
            }
          }
        }
        o[oh * ow_n + ow] = best_v;
        a[oh * ow_n + ow] = static_cast<int32_t>(best);
      }
    }
  }
}

void max_pool2d_backward(const PoolGeometry& g, const float* dout, const int32_t* argmax,
                         float* dx) {
  const int64_t outs = g.out_h() * g.out_w(), plane = g.height * g.width;
  for (int64_t p = 0; p < g.planes; ++p) {
    float* d = dx + p * plane;
    for (int64_t i = 0; i < outs; ++i) d[argmax[p * outs + i]] += dout[p * outs + i];
  }
}

}  // namespace rf::kernels::cpu
