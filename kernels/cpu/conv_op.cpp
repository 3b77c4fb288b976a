// conv2d over a batch, one sample at a time so its buffers stay in cache.
//
// Stride-1 convolutions that conv_direct.h handles (the CNN's two) run as an implicit GEMM
// straight from the padded image: forward, input gradient and weight gradient; every other
// geometry goes through im2col + GEMM.
#include "kernels/cpu/conv_op.h"

#include "kernels/cpu/conv.h"
#include "kernels/cpu/conv_direct.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"

namespace rf::kernels::cpu {

namespace {

// The input gradient of a stride-1 convolution is a stride-1 convolution of the output
// gradient, padded by K-1-p, with the kernel flipped and its channel axes swapped:
//   dX[c, h, w] = sum over (oc, kh, kw) of W[oc, c, K-1-kh, K-1-kw] * Gpad[oc, h+kh, w+kw].
// Its geometry, when conv_direct can run it (square kernel, p <= K-1).
bool input_grad_geometry(const ConvGeometry& g, int64_t OC, ConvGeometry* out) {
  if (g.stride != 1 || g.kernel_h != g.kernel_w || g.padding > g.kernel_h - 1) return false;
  *out = ConvGeometry{OC, g.out_h(), g.out_w(), g.kernel_h, g.kernel_w, 1, g.kernel_h - 1 - g.padding};
  return conv_direct_fits(*out);
}

size_t floats(int64_t n) { return sizeof(float) * static_cast<size_t>(n); }

}  // namespace

void conv2d_forward(const Exec& e, const ConvShape& s, const float* x, const float* w, const float* bias,
                    float* out) {
  const ConvGeometry& g = s.g;
  const int64_t N = s.batch, OC = s.out_channels;
  const int64_t P = g.out_h() * g.out_w(), CKK = g.col_rows();
  const int64_t in_plane = g.channels * g.height * g.width;
  ScratchBlock padded(*e.scratch, floats(g.padded_size()));
  if (conv_direct_fits(g)) {
    for (int64_t n = 0; n < N; ++n) {
      const float* x_n = x + n * in_plane;
      if (g.padding > 0) pad_image(g, x_n, padded.get());
      float* out_n = out + n * OC * P;
      conv_direct(g, OC, w, CKK, g.padding > 0 ? padded.get() : x_n, 0.0f, out_n);
      // The bias while this sample's output is still in cache.
      if (bias) add_channel_bias(1, OC, P, out_n, bias, out_n);
    }
    return;
  }
  ScratchBlock col(*e.scratch, floats(CKK * P));
  for (int64_t n = 0; n < N; ++n) {
    im2col(g, x + n * in_plane, col.get(), P, padded.get());
    float* out_n = out + n * OC * P;
    gemm(false, false, OC, P, CKK, 1.0f, w, CKK, col.get(), P, 0.0f, out_n, P);
    // The bias while this sample's output is still in cache.
    if (bias) add_channel_bias(1, OC, P, out_n, bias, out_n);
  }
}

void conv2d_backward(const Exec& e, const ConvShape& s, const float* x, const float* w, const float* G,
                     float* dX, bool accumulate_dx, float* dW, float* db) {
  if (!dW && !dX && !db) return;
  const ConvGeometry& g = s.g;
  const int64_t N = s.batch, OC = s.out_channels;
  const int64_t P = g.out_h() * g.out_w(), CKK = g.col_rows();
  const int64_t in_plane = g.channels * g.height * g.width;
  const float dx_beta = accumulate_dx ? 1.0f : 0.0f;
  // One sample's columns at a time, recomputed rather than saved from the forward: a
  // 300 KB column block stays in L2, a saved batch of them (40 MB for the CNN's second
  // conv) would be read back from memory, which measured slower. Grouping several
  // samples into one wider GEMM (ld = S*P) also measured slower here (2-15 %).
  ConvGeometry gi{};
  const bool direct_dx = dX && input_grad_geometry(g, OC, &gi);
  ScratchBlock col(*e.scratch, floats(CKK * P));
  ScratchBlock padded(*e.scratch, floats(g.padded_size()));
  // The weight gradient without a column matrix either: dW^T[CKK, OC] summed over the
  // batch from the padded image and G_n^T (conv_direct_weight_grad) in a scratch, added
  // to dW once. (dW = G_n col_n^T made Eigen pack the 300 KB column block every sample.)
  const bool direct_dw = dW && N > 0 && conv_direct_weight_grad_fits(g, OC);
  ScratchBlock gt(*e.scratch, direct_dw ? floats(P * OC) : 0);
  ScratchBlock dwt(*e.scratch, direct_dw ? floats(CKK * OC) : 0);
  ScratchBlock wt(*e.scratch, direct_dx ? floats(OC * CKK) : 0);
  ScratchBlock gpad(*e.scratch, direct_dx ? floats(gi.padded_size()) : 0);
  if (direct_dx) flip_kernel(g, OC, w, wt.get());
  for (int64_t n = 0; n < N; ++n) {
    const float* Gn = G + n * OC * P;
    // Per sample, while G_n is in cache (a separate pass over G would read it again).
    if (db) add_channel_bias_backward(1, OC, P, Gn, db);
    if (dW) {  // dW[OC, CKK] += G_n[OC, P] col_n[CKK, P]^T
      if (direct_dw) {
        const float* x_n = x + n * in_plane;
        if (g.padding > 0) pad_image(g, x_n, padded.get());
        transpose(OC, P, Gn, gt.get());
        conv_direct_weight_grad(g, OC, g.padding > 0 ? padded.get() : x_n, gt.get(), n == 0 ? 0.0f : 1.0f,
                                dwt.get());
      } else {
        im2col(g, x + n * in_plane, col.get(), P, padded.get());
        gemm(false, true, OC, CKK, P, 1.0f, Gn, P, col.get(), P, 1.0f, dW, CKK);
      }
    }
    if (direct_dx) {  // dX_n (+)= the flipped kernel over G_n padded by K-1-p
      pad_image(gi, Gn, gpad.get());
      conv_direct(gi, g.channels, wt.get(), OC * g.kernel_h * g.kernel_w, gpad.get(), dx_beta, dX + n * in_plane);
    } else if (dX) {  // dcol[CKK, P] = W^T G_n, then scatter-add back onto the image
      gemm(true, false, CKK, P, OC, 1.0f, w, CKK, Gn, P, 0.0f, col.get(), P);
      col2im(g, col.get(), P, dX + n * in_plane, padded.get(), accumulate_dx);
    }
  }
  if (direct_dw) add_transposed(OC, CKK, dwt.get(), dW);
}

}  // namespace rf::kernels::cpu
