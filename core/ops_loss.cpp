// log_softmax, nll_loss and cross_entropy = nll_loss(log_softmax(x)).
#include <cstring>

#include "core/autograd.h"
#include "core/dispatch.h"
#include "core/ops.h"
#include "core/ops_check.h"

namespace rf {

Tensor log_softmax(const Tensor& x) {
  detail::require_dims("log_softmax", x, 2, "x");
  const int64_t rows = x.size(0), cols = x.size(1);
  if (cols == 0) throw InvalidInput("log_softmax: zero classes");
  Tensor out = make_result(x.shape(), "log_softmax", {x}, [rows, cols](TensorImpl& o) {
    if (GradOut dx = grad_out(o.inputs[0]))
      kernels_for(o.device, "log_softmax")
          .log_softmax_backward(rows, cols, o.data(), o.grad_data(), dx.data, dx.accumulate());
  }, x.device());
  kernels_for(x.device(), "log_softmax").log_softmax(rows, cols, x.data(), out.data());
  return out;
}

Tensor nll_loss(const Tensor& logp, std::span<const int32_t> labels, Reduction r) {
  detail::require_dims("nll_loss", logp, 2, "log-probabilities");
  const int64_t rows = logp.size(0), cols = logp.size(1);
  if (static_cast<int64_t>(labels.size()) != rows)
    throw InvalidInput(str("nll_loss: ", labels.size(), " labels for ", rows, " rows"));
  if (rows == 0) throw InvalidInput("nll_loss: empty batch");
  for (int64_t i = 0; i < rows; ++i)
    if (labels[i] < 0 || labels[i] >= cols)
      throw InvalidInput(str("nll_loss: label ", labels[i], " of row ", i, " is outside [0, ",
                             cols, ")"));
  // Backward needs the labels after the caller's buffer may have changed: keep a copy.
  auto saved = Storage::allocate(sizeof(int32_t) * rows);
  std::memcpy(saved->data<int32_t>(), labels.data(), sizeof(int32_t) * rows);
  const bool mean = r == Reduction::Mean;
  Tensor out = make_result(Shape{}, "nll_loss", {logp}, [=](TensorImpl& o) {
    const float g = o.grad_data()[0];
    const float scale = mean ? g / static_cast<float>(rows) : g;
    if (float* d = grad_of(o.inputs[0]))
      kernels_for(o.device, "nll_loss").nll_backward(rows, cols, saved->data<int32_t>(), scale, d);
  }, logp.device());
  const float s = kernels_for(logp.device(), "nll_loss").nll_sum(rows, cols, logp.data(),
                                                                 saved->data<int32_t>());
  out.data()[0] = mean ? s / static_cast<float>(rows) : s;
  return out;
}

Tensor cross_entropy(const Tensor& logits, std::span<const int32_t> labels, Reduction r) {
  return nll_loss(log_softmax(logits), labels, r);
}

}  // namespace rf
