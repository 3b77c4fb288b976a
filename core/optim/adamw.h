#pragma once
// AdamW with torch.optim.AdamW's semantics (amsgrad off): p *= 1 - lr * wd;
// m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; p -= lr / (1 - b1^t) * m /
// (sqrt(v) / sqrt(1 - b2^t) + eps), t = the parameter's step count after incrementing.
#include "core/optim/optimizer.h"

namespace rf::optim {

struct AdamWOptions {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 1e-2f;
};

class AdamW : public Optimizer {
 public:
  AdamW(std::vector<NamedTensor> params, const AdamWOptions& options);
  void step() override;
  // "<param>.exp_avg" and "<param>.exp_avg_sq" per parameter.
  std::vector<NamedTensor> named_buffers() const override;
  const char* kind() const override { return "adamw"; }

 private:
  AdamWOptions opt_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_;
};

}  // namespace rf::optim
