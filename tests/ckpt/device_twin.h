#pragma once
// DeviceTwin — an MLP of a CPU model's parameters moved to another device (the simulated
// cuda:0 of tests/core/sim_device.h in the tests), under the same names, so its state
// image and its gradients can be compared with the CPU model's bit for bit.
//
// The CPU model must be a stack of Linear layers (weight, bias) with a ReLU between two
// (an optional Flatten first): tests/ddp/test_model.h's make_test_mlp, tests/ckpt's
// tiny_model. The twin flattens [N, ...] to [N, rest] (a view; no arithmetic) and computes
// matmul, add_bias and relu in the same order, so on a device whose table computes as the
// CPU's does it produces the CPU's bits.
#include <string>
#include <vector>

#include "base/error.h"
#include "base/str.h"
#include "core/nn/module.h"
#include "core/ops.h"

namespace rf::testing {

class DeviceTwin : public nn::Module {
 public:
  DeviceTwin(const nn::Module& cpu_model, Device device) {
    for (const auto& [name, t] : cpu_model.named_parameters()) layers_.push_back(register_parameter(name, t.detach().to(device)));
    if (layers_.size() % 2 != 0)
      throw InvalidInput(str("DeviceTwin: ", layers_.size(), " parameters, expected (weight, bias) pairs"));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = flatten(x, 1);
    for (size_t i = 0; i < layers_.size(); i += 2) {
      h = add_bias(matmul(h, layers_[i], false, true), layers_[i + 1]);
      if (i + 2 < layers_.size()) h = relu(h);
    }
    return h;
  }

 private:
  std::vector<Tensor> layers_;  // handles of the registered parameters
};

}  // namespace rf::testing
