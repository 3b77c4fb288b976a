// conv2d and max_pool2d: shapes checked here, the computation is the device's op-table
// entry (the CPU's per-sample direct or im2col + GEMM routes live in kernels/cpu).
#include "core/autograd.h"
#include "core/device_runtime.h"
#include "core/ops.h"
#include "core/ops_check.h"
#include "kernels/op_table.h"

namespace rf {

using kernels::ConvGeometry;
using kernels::PoolGeometry;

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
    detail::require_same_device(op, x, bias);
    if (bias.size(0) != OC)
      throw InvalidInput(str("conv2d: bias ", bias.shape().str(), " for ", OC, " output channels"));
  }
  const kernels::ConvShape s{g, N, OC};
  const bool has_bias = bias.defined();
  DeviceRuntime& rt = runtime(x.device(), op);
  Tensor out = make_result({N, OC, g.out_h(), g.out_w()}, op, {x, w, bias}, [s, has_bias](TensorImpl& o) {
    const auto& X = o.inputs[0];
    const auto& W = o.inputs[1];
    float* db = has_bias ? grad_of(o.inputs[2]) : nullptr;
    float* dW = grad_of(W);
    const GradOut dX = grad_out(X);
    if (!dW && !dX && !db) return;
    DeviceRuntime& r = runtime(o.device, "conv2d");
    r.ops().conv2d_backward(r.exec(), s, X->data(), W->data(), o.grad_data(), dX.data, dX.accumulate(), dW,
                            db);
  }, x.device());
  rt.ops().conv2d_forward(rt.exec(), s, x.data(), w.data(), has_bias ? bias.data() : nullptr, out.data());
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
  DeviceRuntime& rt = runtime(x.device(), op);
  // The winners' positions, saved for backward (cached memory, like every buffer).
  auto argmax = Storage::allocate(sizeof(int32_t) * outs, x.device());
  Tensor out = make_result({x.size(0), x.size(1), g.out_h(), g.out_w()}, op, {x},
                           [g, argmax](TensorImpl& o) {
    if (GradOut dx = grad_out(o.inputs[0])) {
      DeviceRuntime& r = runtime(o.device, "max_pool2d");
      r.ops().max_pool2d_backward(r.exec(), g, o.grad_data(), argmax->data<int32_t>(), dx.data,
                                  dx.accumulate());
    }
  }, x.device());
  rt.ops().max_pool2d_forward(rt.exec(), g, x.data(), out.data(), argmax->data<int32_t>());
  return out;
}

}  // namespace rf
