#include "kernels/cpu/pool.h"

#include <cmath>
#include <cstring>

namespace rf::kernels::cpu {

// The common 2x2, stride-2 window, without the generic loops: four compares per output.
// Same tie and NaN rule as the general path (first maximum in scan order wins; a NaN wins).
static void max_pool2d_2x2(const PoolGeometry& g, const float* x, float* out, int32_t* argmax) {
  const int64_t oh_n = g.out_h(), ow_n = g.out_w(), W = g.width, plane = g.height * g.width;
  for (int64_t p = 0; p < g.planes; ++p) {
    const float* in = x + p * plane;
    float* o = out + p * oh_n * ow_n;
    int32_t* a = argmax + p * oh_n * ow_n;
    for (int64_t oh = 0; oh < oh_n; ++oh) {
      const float* r0 = in + 2 * oh * W;
      const float* r1 = r0 + W;
      for (int64_t ow = 0; ow < ow_n; ++ow) {
        const int64_t base = 2 * oh * W + 2 * ow;
        float v = r0[2 * ow];
        int64_t best = base;
        const float c1 = r0[2 * ow + 1], c2 = r1[2 * ow], c3 = r1[2 * ow + 1];
        if (c1 > v || c1 != c1) { v = c1; best = base + 1; }
        if (c2 > v || c2 != c2) { v = c2; best = base + W; }
        if (c3 > v || c3 != c3) { v = c3; best = base + W + 1; }
        o[oh * ow_n + ow] = v;
        a[oh * ow_n + ow] = static_cast<int32_t>(best);
      }
    }
  }
}

void max_pool2d(const PoolGeometry& g, const float* x, float* out, int32_t* argmax) {
  if (g.kernel == 2 && g.stride == 2) return max_pool2d_2x2(g, x, out, argmax);
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
                         float* dx, bool accumulate) {
  const int64_t outs = g.out_h() * g.out_w(), plane = g.height * g.width;
  for (int64_t p = 0; p < g.planes; ++p) {
    float* d = dx + p * plane;
    if (!accumulate) std::memset(d, 0, sizeof(float) * plane);
    for (int64_t i = 0; i < outs; ++i) d[argmax[p * outs + i]] += dout[p * outs + i];
  }
}

}  // namespace rf::kernels::cpu
