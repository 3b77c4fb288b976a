#include "core/optim/sgd.h"

#include "base/error.h"
#include "base/str.h"
#include "core/autograd.h"
#include "core/device_runtime.h"
#include "kernels/op_table.h"

namespace rf::optim {

SGD::SGD(std::vector<NamedTensor> params, const SgdOptions& options)
    : Optimizer(std::move(params)), opt_(options) {
  if (opt_.nesterov && (opt_.momentum <= 0.0f || opt_.dampening != 0.0f))
    throw InvalidInput("SGD: nesterov needs momentum > 0 and dampening 0 (as in PyTorch)");
  if (opt_.lr < 0.0f || opt_.momentum < 0.0f || opt_.weight_decay < 0.0f)
    throw InvalidInput(str("SGD: negative lr/momentum/weight_decay: ", opt_.lr, "/", opt_.momentum,
                           "/", opt_.weight_decay));
  lr_ = opt_.lr;
  if (opt_.momentum != 0.0f)
    for (auto& [name, p] : params_) momentum_.push_back(Tensor::zeros(p.shape(), p.device()));
}

void SGD::step() {
  NoGradGuard no_grad;
  const kernels::SgdConfig c{lr_, opt_.momentum, opt_.dampening, opt_.weight_decay, opt_.nesterov};
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i].second;
    if (!p.impl().grad) continue;  // never took part in a backward: PyTorch skips it too
    float* buf = momentum_.empty() ? nullptr : momentum_[i].data();
    DeviceRuntime& r = runtime(p.device(), "sgd_step");
    r.ops().sgd_step(r.exec(), c, p.numel(), p.data(), p.impl().grad_data(), buf, steps_[i] == 0);
    ++steps_[i];
  }
}

void SGD::count_replayed_step() {
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].second.impl().grad) ++steps_[i];
}

std::vector<NamedTensor> SGD::named_buffers() const {
  std::vector<NamedTensor> out;
  for (size_t i = 0; i < momentum_.size(); ++i)
    out.emplace_back(params_[i].first + ".momentum_buffer", momentum_[i]);
  return out;
}

}  // namespace rf::optim
