// reshape / flatten: views that share the input's storage; their gradient is the output's
// gradient read with the input's shape (same contiguous layout).
#include "core/autograd.h"
#include "core/device_runtime.h"
#include "core/ops.h"
#include "core/ops_check.h"
#include "kernels/op_table.h"

namespace rf {

Tensor reshape(const Tensor& x, const Shape& shape) {
  detail::require_defined("reshape", x, "x");
  if (shape.numel() != x.numel())
    throw InvalidInput(str("reshape: cannot view ", x.shape().str(), " (", x.numel(),
                           " elements) as ", shape.str(), " (", shape.numel(), ")"));
  auto v = std::make_shared<TensorImpl>();
  v->shape = shape;
  v->device = x.device();
  v->storage = x.impl().storage;
  v->offset = x.impl().offset;
  if (grad_enabled() && x.requires_grad()) {
    const int64_t n = x.numel();
    v->requires_grad = true;
    v->op = "reshape";
    v->inputs.push_back(x.impl_ptr());
    v->backward = [n](TensorImpl& o) {
      DeviceRuntime& r = runtime(o.device, "reshape");
      const GradOut dx = grad_out(o.inputs[0]);
      r.ops().accumulate(r.exec(), n, o.grad_data(), dx.data, dx.accumulate());
    };
  }
  return Tensor(std::move(v));
}

Tensor flatten(const Tensor& x, int start_dim) {
  detail::require_defined("flatten", x, "x");
  if (start_dim < 0 || start_dim >= x.dim())
    throw InvalidInput(str("flatten: start_dim ", start_dim, " out of range for ", x.shape().str()));
  int64_t rest = 1;
  for (int i = start_dim; i < x.dim(); ++i) rest *= x.size(i);
  switch (start_dim) {
    case 0: return reshape(x, {rest});
    case 1: return reshape(x, {x.size(0), rest});
    case 2: return reshape(x, {x.size(0), x.size(1), rest});
    default: return reshape(x, {x.size(0), x.size(1), x.size(2), rest});
  }
}

}  // namespace rf
