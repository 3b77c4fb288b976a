#include "core/optim/adamw.h"

#include "base/error.h"
#include "base/str.h"
#include "core/autograd.h"
#include "core/device_runtime.h"
#include "kernels/op_table.h"

namespace rf::optim {

AdamW::AdamW(std::vector<NamedTensor> params, const AdamWOptions& options)
    : Optimizer(std::move(params)), opt_(options) {
  if (opt_.lr < 0.0f || opt_.eps < 0.0f || opt_.beta1 < 0.0f || opt_.beta1 >= 1.0f ||
      opt_.beta2 < 0.0f || opt_.beta2 >= 1.0f)
    throw InvalidInput(str("AdamW: bad options lr=", opt_.lr, " betas=(", opt_.beta1, ", ",
                           opt_.beta2, ") eps=", opt_.eps));
  lr_ = opt_.lr;
  for (auto& [name, p] : params_) {
    exp_avg_.push_back(Tensor::zeros(p.shape(), p.device()));
    exp_avg_sq_.push_back(Tensor::zeros(p.shape(), p.device()));
  }
}

void AdamW::step() {
  NoGradGuard no_grad;
  const kernels::AdamWConfig c{lr_, opt_.beta1, opt_.beta2, opt_.eps, opt_.weight_decay};
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i].second;
    if (!p.impl().grad) continue;
    ++steps_[i];
    DeviceRuntime& r = runtime(p.device(), "adamw_step");
    r.ops().adamw_step(r.exec(), c, p.numel(), p.data(), p.impl().grad_data(), exp_avg_[i].data(),
                       exp_avg_sq_[i].data(), steps_[i]);
  }
}

std::vector<NamedTensor> AdamW::named_buffers() const {
  std::vector<NamedTensor> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    out.emplace_back(params_[i].first + ".exp_avg", exp_avg_[i]);
    out.emplace_back(params_[i].first + ".exp_avg_sq", exp_avg_sq_[i]);
  }
  return out;
}

}  // namespace rf::optim
