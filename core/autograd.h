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

// Helpers for derivative rules. Every rule accumulates into its inputs' gradients; as an
// optimisation (a 6 MB memset per activation per step is measurable) the engine leaves a
// new intermediate gradient uninitialised when the rule about to run is its only
// contributor, and the rule may then write instead of add.
//
// grad_of: the input's gradient ready for "+=" (zeroed if it was fresh), or null when the
// input does not require grad.
float* grad_of(const std::shared_ptr<TensorImpl>& t);

// grad_out: the gradient and whether it is fresh. A rule that gets fresh == true MUST
// write every element (with "=") — e.g. GEMM with beta 0, or a copy instead of an axpy.
struct GradOut {
  float* data = nullptr;
  bool fresh = false;
  explicit operator bool() const { return data != nullptr; }
  bool accumulate() const { return !fresh; }
  float beta() const { return fresh ? 0.0f : 1.0f; }
};
GradOut grad_out(const std::shared_ptr<TensorImpl>& t);

}  // namespace rf
