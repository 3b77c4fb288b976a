#pragma once
// Stride-1 convolution of one zero-padded NCHW sample as an implicit GEMM: the same sum
// as W[M, C*KH*KW] x im2col(image), but each step loads the kernel tap's shifted image row
// straight from the padded image instead of from a column matrix. No column matrix is
// written or read back (for the CNN's second conv that was 313 KB per sample, twice).
//
//   out[m, oh, ow] (beta 0: =, 1: +=) sum over (c, kh, kw) of
//       w[m * ldw + (c * KH + kh) * KW + kw] * padded[c, oh + kh, ow + kw]
//
// with padded of size C x (H + 2p) x (W + 2p) (pad_image below, or the image itself when
// p = 0) and out of size M x OH x OW. A register tile is 8 output channels x 2 output rows
// (one vector each) for OW <= 16, or x 1 row (two vectors) for OW <= 32; its sums run over
// all (c, kh, kw) in that order: same inputs, same bits.
//
// The input gradient of a stride-1 convolution is itself one (a "full" convolution of the
// output gradient with the flipped, transposed kernel): conv2d's backward uses this too.
#include <cstdint>

#include "kernels/cpu/conv.h"

namespace rf::kernels::cpu {

// Whether conv_direct handles g (AVX-512 build, stride 1, out_w() <= 32).
bool conv_direct_fits(const ConvGeometry& g);

// padded = the image with g.padding zeros on every side (padded_size() floats).
void pad_image(const ConvGeometry& g, const float* image, float* padded);

// M output channels; `padded` as above (the image itself when g.padding == 0). beta is 0
// (out may hold garbage) or 1.
void conv_direct(const ConvGeometry& g, int64_t M, const float* w, int64_t ldw,
                 const float* padded, float beta, float* out);

// The weight gradient the same way, transposed, with M <= 32 output channels:
//   dwt[(c * KH + kh) * KW + kw, m] (beta 0: =, 1: +=) sum over (oh, ow) of
//       padded[c, oh + kh, ow + kw] * gt[oh * OW + ow, m]
// where gt is the output gradient transposed to [OH*OW, M]. dwt is [C*KH*KW, M]: the
// caller sums samples into it and adds its transpose to dW once per batch.
bool conv_direct_weight_grad_fits(const ConvGeometry& g, int64_t M);
// The kernel of the input gradient's convolution: flipped, with its channel axes swapped:
//   wt[c, (m * KH + kh) * KW + kw] = w[m, (c * KH + KH-1-kh) * KW + KW-1-kw].
void flip_kernel(const ConvGeometry& g, int64_t M, const float* w, float* wt);
void conv_direct_weight_grad(const ConvGeometry& g, int64_t M, const float* padded,
                             const float* gt, float beta, float* dwt);

}  // namespace rf::kernels::cpu
