// log_softmax, nll_loss and cross_entropy = nll_loss(log_softmax(x)).
#include "core/autograd.h"
#include "core/device_runtime.h"
#include "core/ops.h"
#include "core/ops_check.h"
#include "kernels/op_table.h"

namespace rf {

Tensor log_softmax(const Tensor& x) {
  detail::require_dims("log_softmax", x, 2, "x");
  const int64_t rows = x.size(0), cols = x.size(1);
  if (cols == 0) throw InvalidInput("log_softmax: zero classes");
  DeviceRuntime& rt = runtime(x.device(), "log_softmax");
  Tensor out = make_result(x.shape(), "log_softmax", {x}, [rows, cols](TensorImpl& o) {
    if (GradOut dx = grad_out(o.inputs[0])) {
      DeviceRuntime& r = runtime(o.device, "log_softmax");
      r.ops().log_softmax_backward(r.exec(), rows, cols, o.data(), o.grad_data(), dx.data, dx.accumulate());
    }
  }, x.device());
  rt.ops().log_softmax_forward(rt.exec(), rows, cols, x.data(), out.data());
  return out;
}

void check_class_labels(std::span<const int32_t> labels, int64_t classes) {
  for (size_t i = 0; i < labels.size(); ++i)
    if (labels[i] < 0 || labels[i] >= classes)
      throw InvalidInput(str("nll_loss: label ", labels[i], " of row ", i, " is outside [0, ", classes, ")"));
}

Tensor nll_loss(const Tensor& logp, std::span<const int32_t> labels, Reduction r) {
  detail::require_dims("nll_loss", logp, 2, "log-probabilities");
  const int64_t rows = logp.size(0), cols = logp.size(1);
  if (static_cast<int64_t>(labels.size()) != rows)
    throw InvalidInput(str("nll_loss: ", labels.size(), " labels for ", rows, " rows"));
  if (rows == 0) throw InvalidInput("nll_loss: empty batch");
  // The labels are host memory: checked here, before anything is issued to the device.
  check_class_labels(labels, cols);
  // Backward needs the labels after the caller's buffer may have changed: a device copy.
  auto saved = Storage::allocate(sizeof(int32_t) * rows, logp.device());
  runtime(logp.device(), "nll_loss").write(saved->data(), labels.data(), sizeof(int32_t) * rows);
  return nll_loss(logp, std::move(saved), r);
}

Tensor nll_loss(const Tensor& logp, std::shared_ptr<Storage> saved, Reduction r) {
  detail::require_dims("nll_loss", logp, 2, "log-probabilities");
  const int64_t rows = logp.size(0), cols = logp.size(1);
  if (rows == 0) throw InvalidInput("nll_loss: empty batch");
  if (!saved || saved->bytes() < sizeof(int32_t) * static_cast<size_t>(rows))
    throw InvalidInput(str("nll_loss: device labels hold fewer than ", rows, " rows"));
  if (saved->device() != logp.device())
    throw InvalidInput(str("nll_loss: labels on ", device_name(saved->device()), ", log-probabilities on ",
                           device_name(logp.device())));
  DeviceRuntime& rt = runtime(logp.device(), "nll_loss");
  const bool mean = r == Reduction::Mean;
  Tensor out = make_result(Shape{}, "nll_loss", {logp}, [=](TensorImpl& o) {
    if (float* d = grad_of(o.inputs[0])) {
      DeviceRuntime& rr = runtime(o.device, "nll_loss");
      rr.ops().nll_backward(rr.exec(), rows, cols, saved->data<int32_t>(), o.grad_data(), mean, d);
    }
  }, logp.device());
  rt.ops().nll_forward(rt.exec(), rows, cols, logp.data(), saved->data<int32_t>(), mean, out.data());
  return out;
}

Tensor cross_entropy(const Tensor& logits, std::span<const int32_t> labels, Reduction r) {
  return nll_loss(log_softmax(logits), labels, r);
}

Tensor cross_entropy(const Tensor& logits, std::shared_ptr<Storage> labels, Reduction r) {
  return nll_loss(log_softmax(logits), std::move(labels), r);
}

}  // namespace rf
