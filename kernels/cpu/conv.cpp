#include "kernels/cpu/conv.h"

#include <cstring>

namespace rf::kernels::cpu {

void im2col(const ConvGeometry& g, const float* image, float* col, float* padded) {
  const int64_t Hp = g.height + 2 * g.padding, Wp = g.width + 2 * g.padding;
  const int64_t OH = g.out_h(), OW = g.out_w(), s = g.stride;
  const float* src_base = image;
  if (g.padding > 0) {
    std::memset(padded, 0, sizeof(float) * g.padded_size());
    for (int64_t c = 0; c < g.channels; ++c)
      for (int64_t h = 0; h < g.height; ++h)
        std::memcpy(padded + (c * Hp + h + g.padding) * Wp + g.padding,
                    image + (c * g.height + h) * g.width, sizeof(float) * g.width);
    src_base = padded;
  }
  for (int64_t c = 0; c < g.channels; ++c) {
    for (int64_t kh = 0; kh < g.kernel_h; ++kh) {
      for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
        float* dst = col + ((c * g.kernel_h + kh) * g.kernel_w + kw) * OH * OW;
        const float* src = src_base + (c * Hp + kh) * Wp + kw;
        for (int64_t oh = 0; oh < OH; ++oh, dst += OW) {
          const float* row = src + oh * s * Wp;
          if (s == 1) std::memcpy(dst, row, sizeof(float) * OW);
          else
            for (int64_t ow = 0; ow < OW; ++ow) dst[ow] = row[ow * s];
        }
      }
    }
  }
}

void col2im(const ConvGeometry& g, const float* col, float* image, float* padded, bool accumulate) {
  const int64_t Hp = g.height + 2 * g.padding, Wp = g.width + 2 * g.padding;
  const int64_t OH = g.out_h(), OW = g.out_w(), s = g.stride;
  float* acc = image;
  if (g.padding > 0) {
    std::memset(padded, 0, sizeof(float) * g.padded_size());
    acc = padded;
  } else if (!accumulate) {
    std::memset(image, 0, sizeof(float) * g.channels * g.height * g.width);
  }
  for (int64_t c = 0; c < g.channels; ++c) {
    for (int64_t kh = 0; kh < g.kernel_h; ++kh) {
      for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
        const float* src = col + ((c * g.kernel_h + kh) * g.kernel_w + kw) * OH * OW;
        float* dst = acc + (c * Hp + kh) * Wp + kw;
        for (int64_t oh = 0; oh < OH; ++oh, src += OW) {
          float* row = dst + oh * s * Wp;
          if (s == 1)
            for (int64_t ow = 0; ow < OW; ++ow) row[ow] += src[ow];
          else
            for (int64_t ow = 0; ow < OW; ++ow) row[ow * s] += src[ow];
        }
      }
    }
  }
  if (g.padding > 0) {  // the padding border received the taps that fell outside: dropped
    for (int64_t c = 0; c < g.channels; ++c)
      for (int64_t h = 0; h < g.height; ++h) {
        const float* p = padded + (c * Hp + h + g.padding) * Wp + g.padding;
        float* o = image + (c * g.height + h) * g.width;
        if (accumulate)
          for (int64_t w = 0; w < g.width; ++w) o[w] += p[w];
        else
          std::memcpy(o, p, sizeof(float) * g.width);
      }
  }
}

}  // namespace rf::kernels::cpu
