#include "kernels/cpu/conv_direct.h"

#include <algorithm>
#include <cstring>

#include "base/enforce.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace rf::kernels::cpu {

void pad_image(const ConvGeometry& g, const float* image, float* padded) {
  const int64_t Hp = g.height + 2 * g.padding, Wp = g.width + 2 * g.padding;
  std::memset(padded, 0, sizeof(float) * g.padded_size());
  for (int64_t c = 0; c < g.channels; ++c)
    for (int64_t h = 0; h < g.height; ++h)
      std::memcpy(padded + (c * Hp + h + g.padding) * Wp + g.padding,
                  image + (c * g.height + h) * g.width, sizeof(float) * g.width);
}

#if defined(__AVX512F__)
namespace {

inline __mmask16 lanes(int64_t n) {
  return static_cast<__mmask16>(n >= 16 ? 0xFFFFu : (1u << n) - 1u);
}

struct Plane {
  int64_t channels, kernel_h, kernel_w;
  int64_t in_plane, in_w;    // padded input: channel stride, row stride
  int64_t out_plane, out_w;  // output: channel stride, row length
};

// MR output channels x R output rows x NV vectors per row (the last one masked to `last`).
// `in` points at the padded input's row oh0, `out` at out[m0, oh0, 0].
template <int MR, int R, int NV>
void tile(const Plane& p, const float* w, int64_t ldw, const float* in, __mmask16 last,
          float beta, float* out) {
  constexpr int V = R * NV;
  __m512 acc[MR][V];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) acc[i][v] = _mm512_setzero_ps();
  int64_t k = 0;
  for (int64_t c = 0; c < p.channels; ++c) {
    for (int64_t kh = 0; kh < p.kernel_h; ++kh) {
      const float* row = in + c * p.in_plane + kh * p.in_w;
      for (int64_t kw = 0; kw < p.kernel_w; ++kw, ++k) {
        __m512 b[V];
#pragma GCC unroll 2
        for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
          for (int v = 0; v < NV; ++v)
            b[r * NV + v] = _mm512_maskz_loadu_ps(v + 1 == NV ? last : static_cast<__mmask16>(0xFFFF),
                                                  row + r * p.in_w + kw + 16 * v);
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
          const __m512 a = _mm512_set1_ps(w[i * ldw + k]);
#pragma GCC unroll 2
          for (int v = 0; v < V; ++v) acc[i][v] = _mm512_fmadd_ps(a, b[v], acc[i][v]);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) {
        const __mmask16 m = v + 1 == NV ? last : static_cast<__mmask16>(0xFFFF);
        float* o = out + i * p.out_plane + r * p.out_w + 16 * v;
        __m512 s = acc[i][r * NV + v];
        if (beta != 0.0f) s = _mm512_add_ps(s, _mm512_maskz_loadu_ps(m, o));
        _mm512_mask_storeu_ps(o, m, s);
      }
}

template <int R, int NV>
void tile_rows(int64_t mr, const Plane& p, const float* w, int64_t ldw, const float* in,
               __mmask16 last, float beta, float* out) {
  switch (mr) {
#define RF_ROWS(N) \
  case N: return tile<N, R, NV>(p, w, ldw, in, last, beta, out);
    RF_ROWS(1) RF_ROWS(2) RF_ROWS(3) RF_ROWS(4) RF_ROWS(5) RF_ROWS(6) RF_ROWS(7) RF_ROWS(8)
#undef RF_ROWS
    default: RF_ENFORCE(false, "conv_direct: tile of ", mr, " channels");
  }
}

// TR taps (rows of dwt) x NV vectors of output channels; the last vector masked to `last`.
template <int TR, int NV>
void wgrad_tile(const ConvGeometry& g, int64_t t0, int64_t M, const float* padded,
                const float* gt, __mmask16 last, float beta, float* dwt) {
  const int64_t Wp = g.width + 2 * g.padding, plane = (g.height + 2 * g.padding) * Wp;
  const int64_t KK = g.kernel_h * g.kernel_w, OH = g.out_h(), OW = g.out_w();
  const float* tap[TR];
  for (int r = 0; r < TR; ++r) {
    const int64_t t = t0 + r, c = t / KK, kh = (t % KK) / g.kernel_w, kw = t % g.kernel_w;
    tap[r] = padded + c * plane + kh * Wp + kw;
  }
  __m512 acc[TR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < TR; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  const float* b = gt;
  for (int64_t oh = 0; oh < OH; ++oh) {
    const int64_t row = oh * Wp;
    for (int64_t ow = 0; ow < OW; ++ow, b += M) {
      __m512 bv[NV];
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v)
        bv[v] = _mm512_maskz_loadu_ps(v + 1 == NV ? last : static_cast<__mmask16>(0xFFFF), b + 16 * v);
#pragma GCC unroll 8
      for (int r = 0; r < TR; ++r) {
        const __m512 a = _mm512_set1_ps(tap[r][row + ow]);
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(a, bv[v], acc[r][v]);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < TR; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      const __mmask16 m = v + 1 == NV ? last : static_cast<__mmask16>(0xFFFF);
      float* o = dwt + (t0 + r) * M + 16 * v;
      __m512 s = acc[r][v];
      if (beta != 0.0f) s = _mm512_add_ps(s, _mm512_maskz_loadu_ps(m, o));
      _mm512_mask_storeu_ps(o, m, s);
    }
}

template <int NV>
void wgrad_rows(int64_t tr, const ConvGeometry& g, int64_t t0, int64_t M, const float* padded,
                const float* gt, __mmask16 last, float beta, float* dwt) {
  switch (tr) {
#define RF_ROWS(N) \
  case N: return wgrad_tile<N, NV>(g, t0, M, padded, gt, last, beta, dwt);
    RF_ROWS(1) RF_ROWS(2) RF_ROWS(3) RF_ROWS(4) RF_ROWS(5) RF_ROWS(6) RF_ROWS(7) RF_ROWS(8)
#undef RF_ROWS
    default: RF_ENFORCE(false, "conv_direct_weight_grad: tile of ", tr, " taps");
  }
}

}  // namespace

bool conv_direct_weight_grad_fits(const ConvGeometry& g, int64_t M) {
  return g.stride == 1 && M >= 1 && M <= 32;
}

void conv_direct_weight_grad(const ConvGeometry& g, int64_t M, const float* padded,
                             const float* gt, float beta, float* dwt) {
  RF_ENFORCE(conv_direct_weight_grad_fits(g, M), "conv_direct_weight_grad: stride ", g.stride,
             ", ", M, " channels");
  RF_ENFORCE(beta == 0.0f || beta == 1.0f, "conv_direct_weight_grad: beta must be 0 or 1, got ", beta);
  const int64_t T = g.col_rows();
  const bool two = M > 16;
  const __mmask16 last = lanes(two ? M - 16 : M);
  for (int64_t t0 = 0; t0 < T; t0 += 8) {
    const int64_t tr = std::min<int64_t>(8, T - t0);
    if (two) wgrad_rows<2>(tr, g, t0, M, padded, gt, last, beta, dwt);
    else wgrad_rows<1>(tr, g, t0, M, padded, gt, last, beta, dwt);
  }
}

bool conv_direct_fits(const ConvGeometry& g) { return g.stride == 1 && g.out_w() <= 32; }

void conv_direct(const ConvGeometry& g, int64_t M, const float* w, int64_t ldw,
                 const float* padded, float beta, float* out) {
  RF_ENFORCE(conv_direct_fits(g), "conv_direct: stride ", g.stride, ", out_w ", g.out_w());
  RF_ENFORCE(beta == 0.0f || beta == 1.0f, "conv_direct: beta must be 0 or 1, got ", beta);
  const int64_t OH = g.out_h(), OW = g.out_w(), Wp = g.width + 2 * g.padding;
  const Plane p{g.channels, g.kernel_h, g.kernel_w, (g.height + 2 * g.padding) * Wp, Wp, OH * OW, OW};
  const bool two_vectors = OW > 16;
  const __mmask16 last = lanes(two_vectors ? OW - 16 : OW);
  // Channels outer: the 8 weight rows of a tile (8 x C*KH*KW floats) stay in L1 while the
  // row tiles walk the (small) padded image.
  for (int64_t m0 = 0; m0 < M; m0 += 8) {
    const int64_t mr = std::min<int64_t>(8, M - m0);
    const float* wm = w + m0 * ldw;
    float* om = out + m0 * p.out_plane;
    for (int64_t oh = 0; oh < OH;) {
      const float* in = padded + oh * Wp;
      float* o = om + oh * OW;
      if (two_vectors) {
        tile_rows<1, 2>(mr, p, wm, ldw, in, last, beta, o);
        oh += 1;
      } else if (oh + 2 <= OH) {
        tile_rows<2, 1>(mr, p, wm, ldw, in, last, beta, o);
        oh += 2;
      } else {
        tile_rows<1, 1>(mr, p, wm, ldw, in, last, beta, o);
        oh += 1;
      }
    }
  }
}

#else  // no AVX-512: conv2d uses im2col + GEMM

bool conv_direct_fits(const ConvGeometry&) { return false; }
bool conv_direct_weight_grad_fits(const ConvGeometry&, int64_t) { return false; }
void conv_direct_weight_grad(const ConvGeometry&, int64_t, const float*, const float*, float,
                             float*) {
  RF_ENFORCE(false, "conv_direct_weight_grad needs AVX-512");
}
void conv_direct(const ConvGeometry&, int64_t, const float*, int64_t, const float*, float, float*) {
  RF_ENFORCE(false, "conv_direct needs AVX-512");
}

#endif

void flip_kernel(const ConvGeometry& g, int64_t M, const float* w, float* wt) {
  const int64_t KH = g.kernel_h, KW = g.kernel_w, C = g.channels;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t kh = 0; kh < KH; ++kh)
        for (int64_t kw = 0; kw < KW; ++kw)
          wt[(c * M + m) * KH * KW + kh * KW + kw] = w[((m * C + c) * KH + (KH - 1 - kh)) * KW + (KW - 1 - kw)];
}

}  // namespace rf::kernels::cpu
