// matmul, add, mul, sum, add_bias, relu.
#include <cstring>

#include "core/autograd.h"
#include "core/dispatch.h"
#include "core/ops.h"
#include "core/ops_check.h"

namespace rf {

using detail::require_dims;
using detail::require_same_device;
using detail::require_same_shape;

Tensor matmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  const char* op = "matmul";
  require_dims(op, a, 2, "a");
  require_dims(op, b, 2, "b");
  require_same_device(op, a, b);
  const int64_t M = ta ? a.size(1) : a.size(0), K = ta ? a.size(0) : a.size(1);
  const int64_t Kb = tb ? b.size(1) : b.size(0), N = tb ? b.size(0) : b.size(1);
  if (K != Kb)
    throw InvalidInput(str("matmul: inner sizes differ: ", a.shape().str(), (ta ? "^T" : ""),
                           " @ ", b.shape().str(), (tb ? "^T" : "")));
  const int64_t lda = a.size(1), ldb = b.size(1);
  Tensor out = make_result({M, N}, op, {a, b}, [=](TensorImpl& o) {
    const auto& A = o.inputs[0];
    const auto& B = o.inputs[1];
    const float* G = o.grad_data();
    const KernelTable& k = kernels_for(o.device, "matmul");
    // C = op(A) op(B):  dop(A) = G op(B)^T,  dop(B) = op(A)^T G.
    // beta 1 accumulates; beta 0 when this rule is the gradient's first writer.
    if (GradOut dA = grad_out(A)) {
      if (!ta) k.gemm(false, !tb, M, K, N, 1.0f, G, N, B->data(), ldb, dA.beta(), dA.data, K);
      else k.gemm(tb, true, K, M, N, 1.0f, B->data(), ldb, G, N, dA.beta(), dA.data, M);
    }
    if (GradOut dB = grad_out(B)) {
      if (!tb) k.gemm(!ta, false, K, N, M, 1.0f, A->data(), lda, G, N, dB.beta(), dB.data, N);
      else k.gemm(true, ta, N, K, M, 1.0f, G, N, A->data(), lda, dB.beta(), dB.data, K);
    }
  }, a.device());
  kernels_for(a.device(), op).gemm(ta, tb, M, N, K, 1.0f, a.data(), lda, b.data(), ldb, 0.0f,
                                   out.data(), N);
  return out;
}

Tensor add(const Tensor& a, const Tensor& b) {
  require_same_shape("add", a, b);
  require_same_device("add", a, b);
  const int64_t n = a.numel();
  Tensor out = make_result(a.shape(), "add", {a, b}, [n](TensorImpl& o) {
    const KernelTable& k = kernels_for(o.device, "add");
    for (const auto& in : o.inputs) {
      const GradOut d = grad_out(in);
      if (!d) continue;
      if (d.fresh) k.copy(n, o.grad_data(), d.data);
      else k.axpy(n, 1.0f, o.grad_data(), d.data);
    }
  }, a.device());
  kernels_for(a.device(), "add").add(n, a.data(), b.data(), out.data());
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  require_same_shape("mul", a, b);
  require_same_device("mul", a, b);
  kernels_for(a.device(), "mul");
  const int64_t n = a.numel();
  Tensor out = make_result(a.shape(), "mul", {a, b}, [n](TensorImpl& o) {
    const float* G = o.grad_data();
    const float* A = o.inputs[0]->data();
    const float* B = o.inputs[1]->data();
    if (float* dA = grad_of(o.inputs[0]))
      for (int64_t i = 0; i < n; ++i) dA[i] += G[i] * B[i];
    if (float* dB = grad_of(o.inputs[1]))
      for (int64_t i = 0; i < n; ++i) dB[i] += G[i] * A[i];
  }, a.device());
  for (int64_t i = 0; i < n; ++i) out.data()[i] = a.data()[i] * b.data()[i];
  return out;
}

Tensor sum(const Tensor& x) {
  detail::require_defined("sum", x, "x");
  kernels_for(x.device(), "sum");
  const int64_t n = x.numel();
  Tensor out = make_result(Shape{}, "sum", {x}, [n](TensorImpl& o) {
    const float g = o.grad_data()[0];
    if (float* d = grad_of(o.inputs[0]))
      for (int64_t i = 0; i < n; ++i) d[i] += g;
  }, x.device());
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += x.data()[i];
  out.data()[0] = static_cast<float>(s);
  return out;
}

Tensor add_bias(const Tensor& x, const Tensor& bias) {
  const char* op = "add_bias";
  detail::require_defined(op, x, "x");
  require_dims(op, bias, 1, "bias");
  require_same_device(op, x, bias);
  const bool per_channel = x.dim() == 4;
  if (x.dim() != 2 && !per_channel)
    throw InvalidInput(str("add_bias: x must be [N, F] or [N, C, H, W], got ", x.shape().str()));
  const int64_t rows = x.size(0), cols = per_channel ? x.size(1) : x.size(1);
  const int64_t plane = per_channel ? x.size(2) * x.size(3) : 1;
  if (bias.size(0) != cols)
    throw InvalidInput(str("add_bias: bias ", bias.shape().str(), " does not match ",
                           (per_channel ? "channels" : "features"), " of ", x.shape().str()));
  Tensor out = make_result(x.shape(), op, {x, bias}, [=](TensorImpl& o) {
    const KernelTable& k = kernels_for(o.device, "add_bias");
    const float* G = o.grad_data();
    if (GradOut dx = grad_out(o.inputs[0])) {
      if (dx.fresh) k.copy(rows * cols * plane, G, dx.data);
      else k.axpy(rows * cols * plane, 1.0f, G, dx.data);
    }
    if (float* db = grad_of(o.inputs[1])) {
      // The gradient of a broadcast is the sum over the broadcast axes.
      if (per_channel) k.add_channel_bias_backward(rows, cols, plane, G, db);
      else k.add_row_bias_backward(rows, cols, G, db);
    }
  }, x.device());
  const KernelTable& k = kernels_for(x.device(), op);
  if (per_channel) k.add_channel_bias(rows, cols, plane, x.data(), bias.data(), out.data());
  else k.add_row_bias(rows, cols, x.data(), bias.data(), out.data());
  return out;
}

Tensor relu(const Tensor& x) {
  detail::require_defined("relu", x, "x");
  const int64_t n = x.numel();
  Tensor out = make_result(x.shape(), "relu", {x}, [n](TensorImpl& o) {
    if (GradOut dx = grad_out(o.inputs[0]))
      kernels_for(o.device, "relu").relu_backward(n, o.data(), o.grad_data(), dx.data,
                                                  dx.accumulate());
  }, x.device());
  kernels_for(x.device(), "relu").relu(n, x.data(), out.data());
  return out;
}

}  // namespace rf
