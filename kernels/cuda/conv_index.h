#pragma once
// The per-element arithmetic of the CUDA convolution kernels (conv.cu) as
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

// No range check: the launchers check first (conv.cu).
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

}  // namespace rf::kernels::cuda_ops
