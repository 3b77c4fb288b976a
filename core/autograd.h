#pragma once
// The autograd engine, define-by-run (micrograd's engine.py, one tensor wide).
//
// Each op's result remembers its inputs and one derivative rule (core/ops*.cpp keep each
// rule next to its forward). backward(root) walks the graph in reverse topological order;
// every rule ACCUMULATES into its inputs' gradients, so a tensor used twice receives the
// sum of both contributions. Leaf parameters count their uses first; when the last use
// has contributed, the gradient is final and the parameter's hooks fire (exactly once per
// backward). The graph (inputs, closures and intermediate gradients) is released as the
// walk passes, so its buffers go back to the caching allocator for the next step.
#include <vector>

#include "core/tensor.h"

namespace rf {

// Is graph recording on for this thread? (Off inside a NoGradGuard.)
bool grad_enabled();

// RAII: no graph is recorded while it lives (evaluation, optimizer updates).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// Creates the result of op `op` over `inputs`. It records the graph when grad mode is on
// and any input requires grad; `rule` may be empty (an op without a derivative), and
// then backward through it throws an rf::Error naming the op.
Tensor make_result(const Shape& shape, const char* op, const std::vector<Tensor>& inputs,
                   BackwardFn rule, Device device = Device::CPU);

// Implementation of Tensor::backward.
void run_backward(const Tensor& root);

// Helpers for derivative rules: the gradient buffer of an input (allocated and zeroed by
// the engine before the rule runs) or null when that input does not require grad.
inline float* grad_of(const std::shared_ptr<TensorImpl>& t) {
  return t->requires_grad ? t->grad_data() : nullptr;
}

}  // namespace rf
