#include "kernels/cpu/conv.h"

#include <cstring>

namespace rf::kernels::cpu {

// The valid output columns of one kernel tap, for one axis: ow in [lo, hi) reads input
// ow*stride - padding + k, which is inside [0, size). Computing the range once per row
// keeps the inner loop branch-free.
static void valid_range(int64_t size, int64_t out, int64_t k, int64_t stride, int64_t padding,
                        int64_t& lo, int64_t& hi) {
  // smallest o with o*stride - padding + k >= 0
  int64_t need = padding - k;
  lo = need <= 0 ? 0 : (need + stride - 1) / stride;
  // largest o with o*stride - padding + k <= size - 1
  int64_t top = size - 1 + padding - k;
  hi = top < 0 ? 0 : top / stride + 1;
  if (hi > out) hi = out;
  if (lo > hi) lo = hi;
}

void im2col(const ConvGeometry& g, const float* image, float* col) {
  const int64_t oh_n = g.out_h(), ow_n = g.out_w();
  for (int64_t c = 0; c < g.channels; ++c) {
    const float* plane = image + c * g.height * g.width;
    for (int64_t kh = 0; kh < g.kernel_h; ++kh) {
      int64_t oh_lo, oh_hi;
      valid_range(g.height, oh_n, kh, g.stride, g.padding, oh_lo, oh_hi);
      for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
        int64_t ow_lo, ow_hi;
        valid_range(g.width, ow_n, kw, g.stride, g.padding, ow_lo, ow_hi);
        float* row = col + ((c * g.kernel_h + kh) * g.kernel_w + kw) * oh_n * ow_n;
        for (int64_t oh = 0; oh < oh_n; ++oh) {
          float* out = row + oh * ow_n;
          if (oh < oh_lo || oh >= oh_hi) {
            std::memset(out, 0, sizeof(float) * ow_n);
            continue;
          }
          const float* in = plane + (oh * g.stride - g.padding + kh) * g.width;
          for (int64_t ow = 0; ow < ow_lo; ++ow) out[ow] = 0.0f;
          if (g.stride == 1) {
            const float* src = in + (ow_lo - g.padding + kw);
            for (int64_t ow = ow_lo; ow < ow_hi; ++ow) out[ow] = src[ow - ow_lo];
          } else {
            for (int64_t ow = ow_lo; ow < ow_hi; ++ow) out[ow] = in[ow * g.stride - g.padding + kw];
          }
          for (int64_t ow = ow_hi; ow < ow_n; ++ow) out[ow] = 0.0f;
        }
      }
    }
  }
}

void col2im_add(const ConvGeometry& g, const float* col, float* image) {
  const int64_t oh_n = g.out_h(), ow_n = g.out_w();
  for (int64_t c = 0; c < g.channels; ++c) {
    float* plane = image + c * g.height * g.width;
    for (int64_t kh = 0; kh < g.kernel_h; ++kh) {
      int64_t oh_lo, oh_hi;
      valid_range(g.height, oh_n, kh, g.stride, g.padding, oh_lo, oh_hi);
      for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
        int64_t ow_lo, ow_hi;
        valid_range(g.width, ow_n, kw, g.stride, g.padding, ow_lo, ow_hi);
        const float* row = col + ((c * g.kernel_h + kh) * g.kernel_w + kw) * oh_n * ow_n;
        for (int64_t oh = oh_lo; oh < oh_hi; ++oh) {
          const float* src = row + oh * ow_n;
          float* in = plane + (oh * g.stride - g.padding + kh) * g.width;
          for (int64_t ow = ow_lo; ow < ow_hi; ++ow) in[ow * g.stride - g.padding + kw] += src[ow];
        }
      }
    }
  }
}

}  // namespace rf::kernels::cpu
