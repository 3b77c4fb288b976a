#include "kernels/cpu/conv.h"

#include <cstring>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace rf::kernels::cpu {
namespace {

// Rows of a column block are short (OW = 14 or 28 floats in the CNN): a memcpy call or a
// vectorised loop with a scalar tail spends more on overhead than on copying. With
// AVX-512 a masked load/store moves any tail in one instruction.
inline void copy_row(float* dst, const float* src, int64_t n) {
#if defined(__AVX512F__)
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, _mm512_loadu_ps(src + i));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(dst + i, m, _mm512_maskz_loadu_ps(m, src + i));
  }
#else
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
#endif
}

inline void add_row(float* dst, const float* src, int64_t n) {
#if defined(__AVX512F__)
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_add_ps(_mm512_loadu_ps(dst + i), _mm512_loadu_ps(src + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(dst + i, m,
                          _mm512_add_ps(_mm512_maskz_loadu_ps(m, dst + i), _mm512_maskz_loadu_ps(m, src + i)));
  }
#else
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
#endif
}

}  // namespace

void im2col(const ConvGeometry& g, const float* image, float* col, int64_t ld, float* padded) {
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
        float* dst = col + ((c * g.kernel_h + kh) * g.kernel_w + kw) * ld;
        const float* src = src_base + (c * Hp + kh) * Wp + kw;
        for (int64_t oh = 0; oh < OH; ++oh, dst += OW) {
          const float* row = src + oh * s * Wp;
          if (s == 1) copy_row(dst, row, OW);
          else
            for (int64_t ow = 0; ow < OW; ++ow) dst[ow] = row[ow * s];
        }
      }
    }
  }
}

void col2im(const ConvGeometry& g, const float* col, int64_t ld, float* image, float* padded,
            bool accumulate) {
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
        const float* src = col + ((c * g.kernel_h + kh) * g.kernel_w + kw) * ld;
        float* dst = acc + (c * Hp + kh) * Wp + kw;
        for (int64_t oh = 0; oh < OH; ++oh, src += OW) {
          float* row = dst + oh * s * Wp;
          if (s == 1) add_row(row, src, OW);
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
