#pragma once
// Sequential — children named "0", "1", ... in the order added (PyTorch's nn.Sequential),
// so its parameters are "1.weight", "1.bias", ... for a model whose layer 0 is Flatten.
#include <memory>
#include <vector>

#include "core/nn/module.h"

namespace rf::nn {

class Sequential : public Module {
 public:
  Sequential& add(std::shared_ptr<Module> m);
  template <typename M, typename... Args>
  Sequential& emplace(Args&&... args) {
    return add(std::make_shared<M>(std::forward<Args>(args)...));
  }
  Tensor forward(const Tensor& x) override;
  size_t size() const { return layers_.size(); }

 private:
  std::vector<std::shared_ptr<Module>> layers_;
};

}  // namespace rf::nn
