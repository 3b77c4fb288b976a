// matmul, add, mul, sum, add_bias, relu.
#include "core/autograd.h"
#include "core/device_runtime.h"
#include "core/ops.h"
#include "core/ops_check.h"
#include "kernels/op_table.h"

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
  const kernels::MatmulShape s{M, N, K, ta, tb, a.size(1), b.size(1)};
  DeviceRuntime& rt = runtime(a.device(), op);
  Tensor out = make_result({M, N}, op, {a, b}, [s](TensorImpl& o) {
    const auto& A = o.inputs[0];
    const auto& B = o.inputs[1];
    // beta 1 accumulates; beta 0 when this rule is the gradient's first writer.
    const GradOut dA = grad_out(A);
    const GradOut dB = grad_out(B);
    if (!dA && !dB) return;
    DeviceRuntime& r = runtime(o.device, "matmul");
    r.ops().matmul_backward(r.exec(), s, A->data(), B->data(), o.grad_data(), dA.data, dA.beta(), dB.data,
                            dB.beta());
  }, a.device());
  rt.ops().matmul_forward(rt.exec(), s, a.data(), b.data(), out.data());
  return out;
}

Tensor add(const Tensor& a, const Tensor& b) {
  require_same_shape("add", a, b);
  require_same_device("add", a, b);
  const int64_t n = a.numel();
  DeviceRuntime& rt = runtime(a.device(), "add");
  Tensor out = make_result(a.shape(), "add", {a, b}, [n](TensorImpl& o) {
    DeviceRuntime& r = runtime(o.device, "add");
    for (const auto& in : o.inputs) {
      const GradOut d = grad_out(in);
      if (!d) continue;
      r.ops().accumulate(r.exec(), n, o.grad_data(), d.data, d.accumulate());
    }
  }, a.device());
  rt.ops().add_forward(rt.exec(), n, a.data(), b.data(), out.data());
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  require_same_shape("mul", a, b);
  require_same_device("mul", a, b);
  DeviceRuntime& rt = runtime(a.device(), "mul");
  const int64_t n = a.numel();
  Tensor out = make_result(a.shape(), "mul", {a, b}, [n](TensorImpl& o) {
    float* dA = grad_of(o.inputs[0]);
    float* dB = grad_of(o.inputs[1]);
    if (!dA && !dB) return;
    DeviceRuntime& r = runtime(o.device, "mul");
    r.ops().mul_backward(r.exec(), n, o.inputs[0]->data(), o.inputs[1]->data(), o.grad_data(), dA, dB);
  }, a.device());
  rt.ops().mul_forward(rt.exec(), n, a.data(), b.data(), out.data());
  return out;
}

Tensor sum(const Tensor& x) {
  detail::require_defined("sum", x, "x");
  DeviceRuntime& rt = runtime(x.device(), "sum");
  const int64_t n = x.numel();
  Tensor out = make_result(Shape{}, "sum", {x}, [n](TensorImpl& o) {
    if (float* d = grad_of(o.inputs[0])) {
      DeviceRuntime& r = runtime(o.device, "sum");
      r.ops().sum_backward(r.exec(), n, o.grad_data(), d);
    }
  }, x.device());
  rt.ops().sum_forward(rt.exec(), n, x.data(), out.data());
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
  const kernels::BiasShape s{rows, cols, plane, per_channel};
  DeviceRuntime& rt = runtime(x.device(), op);
  Tensor out = make_result(x.shape(), op, {x, bias}, [s](TensorImpl& o) {
    DeviceRuntime& r = runtime(o.device, "add_bias");
    const float* G = o.grad_data();
    if (GradOut dx = grad_out(o.inputs[0]))
      r.ops().accumulate(r.exec(), s.rows * s.cols * s.plane, G, dx.data, dx.accumulate());
    // The gradient of a broadcast is the sum over the broadcast axes.
    if (float* db = grad_of(o.inputs[1])) r.ops().bias_backward(r.exec(), s, G, db);
  }, x.device());
  rt.ops().bias_forward(rt.exec(), s, x.data(), bias.data(), out.data());
  return out;
}

Tensor relu(const Tensor& x) {
  detail::require_defined("relu", x, "x");
  const int64_t n = x.numel();
  DeviceRuntime& rt = runtime(x.device(), "relu");
  Tensor out = make_result(x.shape(), "relu", {x}, [n](TensorImpl& o) {
    if (GradOut dx = grad_out(o.inputs[0])) {
      DeviceRuntime& r = runtime(o.device, "relu");
      r.ops().relu_backward(r.exec(), n, o.data(), o.grad_data(), dx.data, dx.accumulate());
    }
  }, x.device());
  rt.ops().relu_forward(rt.exec(), n, x.data(), out.data());
  return out;
}

}  // namespace rf
