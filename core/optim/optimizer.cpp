#include "core/optim/optimizer.h"

#include "base/error.h"
#include "base/str.h"

namespace rf::optim {

Optimizer::Optimizer(std::vector<NamedTensor> params)
    : params_(std::move(params)), steps_(params_.size(), 0) {
  for (auto& [name, t] : params_)
    if (!t.defined() || !t.requires_grad())
      throw InvalidInput(str("optimizer: parameter '", name, "' is not a tensor that requires grad"));
}

void Optimizer::zero_grad() {
  for (auto& [name, t] : params_) t.zero_grad();
}

std::vector<NamedCounter> Optimizer::named_counters() const {
  std::vector<NamedCounter> out;
  for (size_t i = 0; i < params_.size(); ++i) out.emplace_back(params_[i].first + ".step", steps_[i]);
  return out;
}

void Optimizer::set_counter(const std::string& name, int64_t value) {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].first + ".step" == name) {
      if (value < 0) throw InvalidInput(str("optimizer counter '", name, "' negative: ", value));
      steps_[i] = value;
      return;
    }
  }
  throw InvalidInput(str("optimizer has no counter named '", name, "'"));
}

}  // namespace rf::optim
