#include "kernels/cpu/pool.h"

#include <cmath>
#include <cstring>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace rf::kernels::cpu {

#if defined(__AVX512F__)
// 16 outputs of one output row per iteration: the two input rows are split into their
// even and odd columns (the four taps of 16 windows), then three compare-and-blend steps
// in scan order, the same rule as the scalar loop (a strictly greater value or a NaN takes
// over). Short rows (14 and 7 outputs in the CNN) are one masked iteration.
static void pool_row_2x2(const float* r0, const float* r1, int32_t base, int32_t W, int64_t ow_n,
                         float* o, int32_t* a) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (int64_t ow = 0; ow < ow_n; ow += 16) {
    const int64_t n = ow_n - ow < 16 ? ow_n - ow : 16, in_n = 2 * n;
    const __mmask16 lo = static_cast<__mmask16>(in_n >= 16 ? 0xFFFFu : (1u << in_n) - 1u);
    const __mmask16 hi = static_cast<__mmask16>(in_n >= 32 ? 0xFFFFu : in_n <= 16 ? 0u : (1u << (in_n - 16)) - 1u);
    const __mmask16 out_m = static_cast<__mmask16>(n == 16 ? 0xFFFFu : (1u << n) - 1u);
    const float* p0 = r0 + 2 * ow;
    const float* p1 = r1 + 2 * ow;
    const __m512 a0 = _mm512_maskz_loadu_ps(lo, p0), a1 = _mm512_maskz_loadu_ps(hi, p0 + 16);
    const __m512 b0 = _mm512_maskz_loadu_ps(lo, p1), b1 = _mm512_maskz_loadu_ps(hi, p1 + 16);
    const __m512i idx = _mm512_add_epi32(_mm512_set1_epi32(base + 2 * static_cast<int32_t>(ow)), even);
    __m512 v = _mm512_permutex2var_ps(a0, even, a1);
    __m512i best = idx;
    auto take = [&](__m512 c, __m512i cand) {
      const __mmask16 m = _mm512_cmp_ps_mask(c, v, _CMP_GT_OQ) | _mm512_cmp_ps_mask(c, c, _CMP_UNORD_Q);
      v = _mm512_mask_blend_ps(m, v, c);
      best = _mm512_mask_blend_epi32(m, best, cand);
    };
    take(_mm512_permutex2var_ps(a0, odd, a1), _mm512_add_epi32(idx, _mm512_set1_epi32(1)));
    take(_mm512_permutex2var_ps(b0, even, b1), _mm512_add_epi32(idx, _mm512_set1_epi32(W)));
    take(_mm512_permutex2var_ps(b0, odd, b1), _mm512_add_epi32(idx, _mm512_set1_epi32(W + 1)));
    _mm512_mask_storeu_ps(o + ow, out_m, v);
    _mm512_mask_storeu_epi32(a + ow, out_m, best);
  }
}
#endif

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
#if defined(__AVX512F__)
      pool_row_2x2(r0, r1, static_cast<int32_t>(2 * oh * W), static_cast<int32_t>(W), ow_n,
                   o + oh * ow_n, a + oh * ow_n);
      continue;
#endif
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

#if defined(__AVX512F__)
// Overwrite mode of the 2x2, stride-2 window on even planes: every input belongs to exactly
// one window, so each input row pair is written once, in order — the winner gets dout, the
// other three 0 — instead of zeroing the plane and scattering into it. 16 windows per step:
// compare the saved index with each of the four tap positions, then interleave the even
// and odd columns back into two 32-float input rows.
static void pool_backward_2x2_overwrite(const PoolGeometry& g, const float* dout,
                                        const int32_t* argmax, float* dx) {
  const int64_t oh_n = g.out_h(), ow_n = g.out_w(), W = g.width, plane = g.height * g.width;
  const __m512i lane2 = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  for (int64_t p = 0; p < g.planes; ++p) {
    const float* go = dout + p * oh_n * ow_n;
    const int32_t* a = argmax + p * oh_n * ow_n;
    float* d = dx + p * plane;
    for (int64_t oh = 0; oh < oh_n; ++oh) {
      float* r0 = d + 2 * oh * W;
      float* r1 = r0 + W;
      for (int64_t ow = 0; ow < ow_n; ow += 16) {
        const int64_t n = ow_n - ow < 16 ? ow_n - ow : 16;
        const __mmask16 m = static_cast<__mmask16>(n == 16 ? 0xFFFFu : (1u << n) - 1u);
        const __m512 gv = _mm512_maskz_loadu_ps(m, go + oh * ow_n + ow);
        const __m512i av = _mm512_maskz_loadu_epi32(m, a + oh * ow_n + ow);
        const __m512i c00 = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(2 * oh * W + 2 * ow)), lane2);
        const __m512i c10 = _mm512_add_epi32(c00, _mm512_set1_epi32(static_cast<int32_t>(W)));
        const __m512i one = _mm512_set1_epi32(1);
        const __m512 v00 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(av, c00), gv);
        const __m512 v01 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(av, _mm512_add_epi32(c00, one)), gv);
        const __m512 v10 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(av, c10), gv);
        const __m512 v11 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(av, _mm512_add_epi32(c10, one)), gv);
        // 2n input floats per row: lanes [0, 16) from the first 8 windows, the rest after.
        const int64_t in_n = 2 * n;
        const __mmask16 m_lo = static_cast<__mmask16>(in_n >= 16 ? 0xFFFFu : (1u << in_n) - 1u);
        const __mmask16 m_hi = static_cast<__mmask16>(in_n >= 32 ? 0xFFFFu : in_n <= 16 ? 0u : (1u << (in_n - 16)) - 1u);
        _mm512_mask_storeu_ps(r0 + 2 * ow, m_lo, _mm512_permutex2var_ps(v00, lo, v01));
        _mm512_mask_storeu_ps(r0 + 2 * ow + 16, m_hi, _mm512_permutex2var_ps(v00, hi, v01));
        _mm512_mask_storeu_ps(r1 + 2 * ow, m_lo, _mm512_permutex2var_ps(v10, lo, v11));
        _mm512_mask_storeu_ps(r1 + 2 * ow + 16, m_hi, _mm512_permutex2var_ps(v10, hi, v11));
      }
    }
  }
}
#endif

void max_pool2d_backward(const PoolGeometry& g, const float* dout, const int32_t* argmax,
                         float* dx, bool accumulate) {
#if defined(__AVX512F__)
  if (!accumulate && g.kernel == 2 && g.stride == 2 && g.height % 2 == 0 && g.width % 2 == 0)
    return pool_backward_2x2_overwrite(g, dout, argmax, dx);
#endif
  const int64_t outs = g.out_h() * g.out_w(), plane = g.height * g.width;
  for (int64_t p = 0; p < g.planes; ++p) {
    float* d = dx + p * plane;
    if (!accumulate) std::memset(d, 0, sizeof(float) * plane);
    for (int64_t i = 0; i < outs; ++i) d[argmax[p * outs + i]] += dout[p * outs + i];
  }
}

}  // namespace rf::kernels::cpu
