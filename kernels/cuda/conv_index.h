#pragma once
// The per-element arithmetic of the CUDA convolution kernels (conv.cu, conv_direct.cu) as
// plain functions of 32-bit ints, compiled for the device there and for the host in
// tests/kernels/test_conv_index.cpp, which runs them over every index against
// kernels/reference. The launchers check that every index of a chunk fits int32 before
// they launch (32-bit divisions cost a fraction of 64-bit ones, and the kernels divide
// in every element).
#include <cstdint>

#include "kernels/geometry.h"

#if defined(__CUDACC__)
#define RF_HD __host__ __device__
#else
#define RF_HD
#endif
#if defined(__CUDA_ARCH__)
#define RF_UNROLL _Pragma("unroll")
#else
#define RF_UNROLL
#endif

namespace rf::kernels::cuda_ops {

struct Geo32 {
  int c, h, w, kh, kw, stride, pad, oh, ow;
  RF_HD int positions() const { return oh * ow; }  // P
  RF_HD int rows() const { return c * kh * kw; }   // CKK
  RF_HD int in_plane() const { return c * h * w; }
};

// No range check: the launchers check first (conv.cu, conv_direct.cu).
inline Geo32 geo32_unchecked(const ConvGeometry& g) {
  return {static_cast<int>(g.channels), static_cast<int>(g.height), static_cast<int>(g.width),
          static_cast<int>(g.kernel_h),  static_cast<int>(g.kernel_w), static_cast<int>(g.stride),
          static_cast<int>(g.padding),   static_cast<int>(g.out_h()), static_cast<int>(g.out_w())};
}

// ---- im2col + GEMM (conv.cu) ------------------------------------------------------------
//
// A chunk of nb samples has one column entry per (n, row, p), row = (c*KH + kh)*KW + kw
// and p = oh*OW + ow, holding x[n, c, oh*s - pad + kh, ow*s - pad + kw] (0 in the padding).
// Sample-major: entry at (n*CKK + row)*P + p, one [CKK, P] matrix per sample (the forward's
// and the input gradient's batched GEMMs). Row-major: at (row*nb + n)*P + p, one
// [CKK, nb*P] matrix (the weight gradient's single GEMM). Either way p is the fastest
// index, so consecutive threads write consecutive entries.
enum class ColLayout { kSampleMajor, kRowMajor };

struct ColEntry {
  int n, row, p;
};

RF_HD inline ColEntry col_entry(const Geo32& g, int nb, ColLayout layout, int i) {
  const int P = g.positions(), q = i / P, p = i - q * P;
  if (layout == ColLayout::kSampleMajor) {
    const int n = q / g.rows();
    return {n, q - n * g.rows(), p};
  }
  const int row = q / nb;
  return {q - row * nb, row, p};
}

// The offset, in the chunk's input, of the element column entry e copies; -1 in the padding.
RF_HD inline int im2col_source(const Geo32& g, const ColEntry& e) {
  const int kw = e.row % g.kw, t = e.row / g.kw, kh = t % g.kh, c = t / g.kh;
  const int oh = e.p / g.ow, ow = e.p - oh * g.ow;
  const int ih = oh * g.stride - g.pad + kh, iw = ow * g.stride - g.pad + kw;
  if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) return -1;
  return ((e.n * g.c + c) * g.h + ih) * g.w + iw;
}

// The input gradient at offset i of the chunk (n, c, h, w): the sum, over the taps (kh, kw)
// whose output position reads (h, w), in kh-then-kw order, of the sample-major column
// gradient's entries. A gather: each input element is one thread's, no atomics.
RF_HD inline float col2im_sum(const Geo32& g, const float* dcol, int i) {
  const int w = i % g.w, t1 = i / g.w, h = t1 % g.h, t2 = t1 / g.h, c = t2 % g.c, n = t2 / g.c;
  const int P = g.positions();
  const float* base = dcol + (n * g.rows() + c * g.kh * g.kw) * P;
  float s = 0.0f;
  for (int kh = 0; kh < g.kh; ++kh) {
    const int th = h + g.pad - kh;
    if (th < 0) break;  // th only falls as kh grows
    const int oh = th / g.stride;
    if (oh * g.stride != th || oh >= g.oh) continue;
    for (int kw = 0; kw < g.kw; ++kw) {
      const int tw = w + g.pad - kw;
      if (tw < 0) break;
      const int ow = tw / g.stride;
      if (ow * g.stride != tw || ow >= g.ow) continue;
      s += base[(kh * g.kw + kw) * P + oh * g.ow + ow];
    }
  }
  return s;
}

// ---- one input channel, direct (conv_direct.cu) ------------------------------------------
//
// A block stages one sample's plane zero-padded in shared memory: staged row r, column t
// (r < hs, t < ws) at r*ws + t holds x[r - pad, t - pad] or 0, where hs = (OH-1)*s + KH and
// ws = (OW-1)*s + KW are the rows and columns some output reads. Output p's tap (kh, kw)
// then reads staged[origin(p) + kh*ws + kw] with no bounds test. Output channels go in
// quads (ocq = ceil(OC/4), the last padded with zero weights) so that one 16-byte shared
// load serves four multiply-adds.
struct alignas(16) Quad {
  float v[4];
};

constexpr int kDirectMaxKw = 8;  // the weight gradient keeps a kernel row of quads in registers

struct OneChannel {
  Geo32 g;  // g.c == 1
  int oc, ocq, hs, ws;
};

inline OneChannel one_channel_unchecked(const Geo32& g, int oc) {
  return {g, oc, (oc + 3) / 4, (g.oh - 1) * g.stride + g.kh, (g.ow - 1) * g.stride + g.kw};
}

RF_HD inline float staged_input(const OneChannel& d, const float* xn, int r, int t) {
  const int ih = r - d.g.pad, iw = t - d.g.pad;
  return ih >= 0 && ih < d.g.h && iw >= 0 && iw < d.g.w ? xn[ih * d.g.w + iw] : 0.0f;
}

RF_HD inline int staged_origin(const OneChannel& d, int p) {
  const int oh = p / d.g.ow, ow = p - oh * d.g.ow;
  return oh * d.g.stride * d.ws + ow * d.g.stride;
}

// The staged weights: quad q of tap (kh*KW + kw) at tap*ocq + q, lane l holding
// w[4q + l, 0, kh, kw] (0 past OC).
RF_HD inline float staged_weight(const OneChannel& d, const float* w, int tap, int oc) {
  return oc < d.oc ? w[oc * d.g.kh * d.g.kw + tap] : 0.0f;
}

// Forward: the sums of output p for the quads q0 .. q0+3 (those below ocq), over the taps
// in kh-then-kw order: acc[j].v[l] = sum of wt[tap*ocq + q0 + j].v[l] * staged x.
RF_HD inline void direct_forward_sums(const OneChannel& d, const float* xs, const Quad* wt, int p, int q0,
                                      Quad acc[4]) {
  RF_UNROLL
  for (int j = 0; j < 4; ++j)
    for (int l = 0; l < 4; ++l) acc[j].v[l] = 0.0f;
  const int base = staged_origin(d, p);
  for (int kh = 0; kh < d.g.kh; ++kh)
    for (int kw = 0; kw < d.g.kw; ++kw) {
      const float xv = xs[base + kh * d.ws + kw];
      const Quad* row = wt + (kh * d.g.kw + kw) * d.ocq + q0;
      RF_UNROLL
      for (int j = 0; j < 4; ++j) {
        if (q0 + j >= d.ocq) break;
        const Quad wq = row[j];
        RF_UNROLL
        for (int l = 0; l < 4; ++l) acc[j].v[l] += wq.v[l] * xv;
      }
    }
}

// Weight gradient: output p's terms for kernel row kh and one quad of output channels,
// gq = that quad's output gradient at p: acc[kw].v[l] += gq.v[l] * staged x at tap (kh, kw).
RF_HD inline void direct_wgrad_terms(const OneChannel& d, const float* xs, int origin, int kh, const Quad& gq,
                                     Quad acc[kDirectMaxKw]) {
  const float* row = xs + origin + kh * d.ws;
  RF_UNROLL
  for (int kw = 0; kw < kDirectMaxKw; ++kw) {
    if (kw >= d.g.kw) break;
    const float xv = row[kw];
    RF_UNROLL
    for (int l = 0; l < 4; ++l) acc[kw].v[l] += gq.v[l] * xv;
  }
}

}  // namespace rf::kernels::cuda_ops
