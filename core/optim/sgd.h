#pragma once
// SGD with torch.optim.SGD's semantics: g = grad + wd * p; with momentum,
// buf = g on a parameter's first step, else buf = momentum * buf + (1 - dampening) * g;
// g = nesterov ? g + momentum * buf : buf; p -= lr * g.
#include "core/optim/optimizer.h"

namespace rf::optim {

struct SgdOptions {
  float lr = 0.01f, momentum = 0.0f, dampening = 0.0f, weight_decay = 0.0f;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<NamedTensor> params, const SgdOptions& options);
  void step() override;
  // A replay of a captured step (models/graph_step.h) applied step()'s update on the device
  // without calling it: the counters advance as step() would have advanced them. A capture
  // is valid only after every parameter's first step (that one initialises the momentum).
  void count_replayed_step();
  // "<param>.momentum_buffer" per parameter when momentum != 0 (zeros before step one).
  std::vector<NamedTensor> named_buffers() const override;
  const char* kind() const override { return "sgd"; }
  const SgdOptions& options() const { return opt_; }

 private:
  SgdOptions opt_;
  std::vector<Tensor> momentum_;  // allocated once, reused every step
};

}  // namespace rf::optim
