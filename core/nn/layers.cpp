#include "core/nn/layers.h"

#include "base/error.h"
#include "base/str.h"
#include "core/nn/init.h"
#include "core/ops.h"

namespace rf::nn {

Linear::Linear(int64_t in_features, int64_t out_features, Generator& gen, bool with_bias) {
  if (in_features <= 0 || out_features <= 0)
    throw InvalidInput(str("Linear(", in_features, ", ", out_features, "): sizes must be positive"));
  const float bound = kaiming_uniform_bound(in_features);
  weight = Tensor::empty({out_features, in_features});
  uniform_(weight, -bound, bound, gen);
  register_parameter("weight", weight);
  if (with_bias) {
    bias = Tensor::empty({out_features});
    uniform_(bias, -bound, bound, gen);  // 1/sqrt(fan_in), the same number
    register_parameter("bias", bias);
  }
}

Tensor Linear::forward(const Tensor& x) {
  Tensor y = matmul(x, weight, false, true);
  return bias.defined() ? add_bias(y, bias) : y;
}

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, Generator& gen,
               int64_t stride_, int64_t padding_, bool with_bias)
    : stride(stride_), padding(padding_) {
  if (in_channels <= 0 || out_channels <= 0 || kernel <= 0)
    throw InvalidInput(str("Conv2d(", in_channels, ", ", out_channels, ", ", kernel,
                           "): sizes must be positive"));
  const int64_t fan_in = in_channels * kernel * kernel;
  const float bound = kaiming_uniform_bound(fan_in);
  weight = Tensor::empty({out_channels, in_channels, kernel, kernel});
  uniform_(weight, -bound, bound, gen);
  register_parameter("weight", weight);
  if (with_bias) {
    bias = Tensor::empty({out_channels});
    uniform_(bias, -bound, bound, gen);
    register_parameter("bias", bias);
  }
}

Tensor Conv2d::forward(const Tensor& x) { return conv2d(x, weight, bias, stride, padding); }

Tensor ReLU::forward(const Tensor& x) { return relu(x); }

Tensor MaxPool2d::forward(const Tensor& x) { return max_pool2d(x, kernel_, stride_); }

Tensor Flatten::forward(const Tensor& x) { return flatten(x, 1); }

}  // namespace rf::nn
