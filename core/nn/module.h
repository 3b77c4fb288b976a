#pragma once
// Module — a layer or a container of layers with named parameters.
//
// Names follow PyTorch exactly so weights exported from torch load by name: a module's own
// parameters come first in registration order ("weight", "bias"), then each child's,
// prefixed with the child's name and a dot ("1.weight" in a Sequential).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace rf::nn {

class Module {
 public:
  virtual ~Module() = default;
  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }

  std::vector<NamedTensor> named_parameters() const;
  std::vector<Tensor> parameters() const;
  // Throws rf::InvalidInput naming the parameter when absent.
  Tensor parameter(const std::string& name) const;
  void zero_grad();  // every parameter's gradient := 0 (in place, views stay views)
  int64_t num_parameters() const;

 protected:
  // The parameter becomes a leaf that requires grad, with a zeroed gradient allocated now
  // (so a reducer can re-point it at its bucket before the first backward).
  Tensor& register_parameter(std::string name, Tensor t);
  void register_module(std::string name, std::shared_ptr<Module> m);

 private:
  void collect(const std::string& prefix, std::vector<NamedTensor>& out) const;
  std::vector<NamedTensor> params_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

}  // namespace rf::nn
