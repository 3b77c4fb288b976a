// conv2d (one sample at a time so its buffers stay in cache) and max_pool2d.
//
// Stride-1 convolutions that kernels/cpu/conv_direct.h handles (the CNN's two) run as an
// implicit GEMM straight from the padded image: forward, input gradient and weight gradient
// (kernels chosen through core/dispatch.h); every other geometry goes through im2col + GEMM.
#include "core/autograd.h"
#include "core/dispatch.h"
#include "core/ops.h"
#include "core/ops_check.h"

namespace rf {

using kernels::cpu::ConvGeometry;
using kernels::cpu::PoolGeometry;

namespace {

// The input gradient of a stride-1 convolution is a stride-1 convolution of the output
// gradient, padded by K-1-p, with the kernel flipped and its channel axes swapped:
//   dX[c, h, w] = sum over (oc, kh, kw) of W[oc, c, K-1-kh, K-1-kw] * Gpad[oc, h+kh, w+kw].
// Its geometry, when conv_direct can run it (square kernel, p <= K-1).
bool input_grad_geometry(const KernelTable& k, const ConvGeometry& g, int64_t OC, ConvGeometry* out) {
  if (g.stride != 1 || g.kernel_h != g.kernel_w || g.padding > g.kernel_h - 1) return false;
  *out = ConvGeometry{OC, g.out_h(), g.out_w(), g.kernel_h, g.kernel_w, 1, g.kernel_h - 1 - g.padding};
  return k.conv_direct_fits(*out);
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t stride,
              int64_t padding) {
  const char* op = "conv2d";
  detail::require_dims(op, x, 4, "input");
  detail::require_dims(op, w, 4, "weight");
  detail::require_same_device(op, x, w);
  if (stride < 1 || padding < 0)
    throw InvalidInput(str("conv2d: stride must be >= 1 and padding >= 0, got stride ", stride,
                           " padding ", padding));
  if (w.size(1) != x.size(1))
    throw InvalidInput(str("conv2d: weight ", w.shape().str(), " expects ", w.size(1),
                           " input channels, input ", x.shape().str(), " has ", x.size(1)));
  const int64_t N = x.size(0), OC = w.size(0);
  const ConvGeometry g{x.size(1), x.size(2), x.size(3), w.size(2), w.size(3), stride, padding};
  if (x.size(2) + 2 * padding < g.kernel_h || x.size(3) + 2 * padding < g.kernel_w)
    throw InvalidInput(str("conv2d: kernel ", w.shape().str(), " larger than padded input ",
                           x.shape().str()));
  if (bias.defined()) {
    detail::require_dims(op, bias, 1, "bias");
    if (bias.size(0) != OC)
      throw InvalidInput(str("conv2d: bias ", bias.shape().str(), " for ", OC, " output channels"));
  }
  const int64_t OH = g.out_h(), OW = g.out_w(), P = OH * OW, CKK = g.col_rows();
  const int64_t in_plane = g.channels * g.height * g.width;
  const bool has_bias = bias.defined();

  Tensor out = make_result({N, OC, OH, OW}, op, {x, w, bias}, [=](TensorImpl& o) {
    const KernelTable& k = kernels_for(o.device, "conv2d");
    const auto& X = o.inputs[0];
    const auto& W = o.inputs[1];
    const float* G = o.grad_data();
    float* db = has_bias ? grad_of(o.inputs[2]) : nullptr;
    float* dW = grad_of(W);
    const GradOut dX = grad_out(X);
    if (!dW && !dX && !db) return;
    // One sample's columns at a time, recomputed rather than saved from the forward: a
    // 300 KB column block stays in L2, a saved batch of them (40 MB for the CNN's second
    // conv) would be read back from memory, which measured slower. Grouping several
    // samples into one wider GEMM (ld = S*P) also measured slower here (2-15 %).
    ConvGeometry gi{};
    const bool direct_dx = dX && input_grad_geometry(k, g, OC, &gi);
    auto col = Storage::allocate(sizeof(float) * CKK * P, o.device);
    auto padded = Storage::allocate(sizeof(float) * g.padded_size(), o.device);
    // The weight gradient without a column matrix either: dW^T[CKK, OC] summed over the
    // batch from the padded image and G_n^T (conv_direct_weight_grad) in a scratch, added
    // to dW once. (dW = G_n col_n^T made Eigen pack the 300 KB column block every sample.)
    const bool direct_dw = dW && N > 0 && k.conv_direct_weight_grad_fits(g, OC);
    std::shared_ptr<Storage> gt, dwt;
    if (direct_dw) {
      gt = Storage::allocate(sizeof(float) * P * OC, o.device);
      dwt = Storage::allocate(sizeof(float) * CKK * OC, o.device);
    }
    std::shared_ptr<Storage> wt, gpad;
    if (direct_dx) {
      wt = Storage::allocate(sizeof(float) * OC * CKK, o.device);
      gpad = Storage::allocate(sizeof(float) * gi.padded_size(), o.device);
      k.flip_kernel(g, OC, W->data(), wt->data());
    }
    for (int64_t n = 0; n < N; ++n) {
      const float* Gn = G + n * OC * P;
      // Per sample, while G_n is in cache (a separate pass over G would read it again).
      if (db) k.add_channel_bias_backward(1, OC, P, Gn, db);
      if (dW) {  // dW[OC, CKK] += G_n[OC, P] col_n[CKK, P]^T
        if (direct_dw) {
          const float* x_n = X->data() + n * in_plane;
          if (g.padding > 0) k.pad_image(g, x_n, padded->data());
          k.transpose(OC, P, Gn, gt->data());
          k.conv_direct_weight_grad(g, OC, g.padding > 0 ? padded->data() : x_n, gt->data(),
                                    n == 0 ? 0.0f : 1.0f, dwt->data());
        } else {
          k.im2col(g, X->data() + n * in_plane, col->data(), P, padded->data());
          k.gemm(false, true, OC, CKK, P, 1.0f, Gn, P, col->data(), P, 1.0f, dW, CKK);
        }
      }
      if (direct_dx) {  // dX_n (+)= the flipped kernel over G_n padded by K-1-p
        k.pad_image(gi, Gn, gpad->data());
        k.conv_direct(gi, g.channels, wt->data(), OC * g.kernel_h * g.kernel_w, gpad->data(), dX.beta(),
                      dX.data + n * in_plane);
      } else if (dX) {  // dcol[CKK, P] = W^T G_n, then scatter-add back onto the image
        k.gemm(true, false, CKK, P, OC, 1.0f, W->data(), CKK, Gn, P, 0.0f, col->data(), P);
        k.col2im(g, col->data(), P, dX.data + n * in_plane, padded->data(), dX.accumulate());
      }
    }
    if (direct_dw) k.add_transposed(OC, CKK, dwt->data(), dW);
  }, x.device());

  const KernelTable& k = kernels_for(x.device(), op);
  auto padded = Storage::allocate(sizeof(float) * g.padded_size(), x.device());
  if (k.conv_direct_fits(g)) {
    for (int64_t n = 0; n < N; ++n) {
      const float* x_n = x.data() + n * in_plane;
      if (g.padding > 0) k.pad_image(g, x_n, padded->data());
      float* out_n = out.data() + n * OC * P;
      k.conv_direct(g, OC, w.data(), CKK, g.padding > 0 ? padded->data() : x_n, 0.0f, out_n);
      // The bias while this sample's output is still in cache.
      if (has_bias) k.add_channel_bias(1, OC, P, out_n, bias.data(), out_n);
    }
    return out;
  }
  auto col = Storage::allocate(sizeof(float) * CKK * P, x.device());
  for (int64_t n = 0; n < N; ++n) {
    k.im2col(g, x.data() + n * in_plane, col->data(), P, padded->data());
    float* out_n = out.data() + n * OC * P;
    k.gemm(false, false, OC, P, CKK, 1.0f, w.data(), CKK, col->data(), P, 0.0f, out_n, P);
    // The bias while this sample's output is still in cache.
    if (has_bias) k.add_channel_bias(1, OC, P, out_n, bias.data(), out_n);
  }
  return out;
}

Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride) {
  const char* op = "max_pool2d";
  detail::require_dims(op, x, 4, "input");
  if (stride == 0) stride = kernel;
  if (kernel < 1 || stride < 1)
    throw InvalidInput(str("max_pool2d: kernel and stride must be >= 1, got ", kernel, ", ", stride));
  if (x.size(2) < kernel || x.size(3) < kernel)
    throw InvalidInput(str("max_pool2d: kernel ", kernel, " larger than input ", x.shape().str()));
  const PoolGeometry g{x.size(0) * x.size(1), x.size(2), x.size(3), kernel, stride};
  const int64_t outs = g.planes * g.out_h() * g.out_w();
  // The winners' positions, saved for backward (cached memory, like every buffer).
  auto argmax = Storage::allocate(sizeof(int32_t) * outs, x.device());
  Tensor out = make_result({x.size(0), x.size(1), g.out_h(), g.out_w()}, op, {x},
                           [g, argmax](TensorImpl& o) {
    if (GradOut dx = grad_out(o.inputs[0]))
      kernels_for(o.device, "max_pool2d")
          .max_pool2d_backward(g, o.grad_data(), argmax->data<int32_t>(), dx.data,
                               dx.accumulate());
  }, x.device());
  kernels_for(x.device(), op).max_pool2d(g, x.data(), out.data(), argmax->data<int32_t>());
  return out;
}

}  // namespace rf
