#pragma once
// The layers of the reference models. Constructors that create parameters take the
// Generator and draw weight first, then bias (PyTorch's reset_parameters order).
#include <cstdint>

#include "core/nn/module.h"
#include "core/random.h"

namespace rf::nn {

class Linear : public Module {  // y = x W^T + b, W [out, in]
 public:
  Linear(int64_t in_features, int64_t out_features, Generator& gen, bool bias = true);
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
};

class Conv2d : public Module {  // W [out, in, k, k]
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, Generator& gen,
         int64_t stride = 1, int64_t padding = 0, bool bias = true);
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
  int64_t stride, padding;
};

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(int64_t kernel, int64_t stride = 0) : kernel_(kernel), stride_(stride) {}
  Tensor forward(const Tensor& x) override;

 private:
  int64_t kernel_, stride_;
};

class Flatten : public Module {  // [N, ...] -> [N, rest], a view
 public:
  Tensor forward(const Tensor& x) override;
};

}  // namespace rf::nn
