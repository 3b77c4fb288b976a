#pragma once
// PyTorch's default initialisation of Linear and Conv2d, from our Generator.
//   weight: kaiming_uniform_(a = sqrt(5)): gain = sqrt(2 / (1 + a^2)) = sqrt(1/3),
//           bound = gain * sqrt(3 / fan_in) = 1 / sqrt(fan_in)
//   bias:   uniform(-1/sqrt(fan_in), 1/sqrt(fan_in))
// fan_in = in_features (Linear) or in_channels * kh * kw (Conv2d).
#include <cstdint>

#include "core/random.h"
#include "core/tensor.h"

namespace rf::nn {

float kaiming_uniform_bound(int64_t fan_in);  // for a = sqrt(5)
void uniform_(Tensor& t, float lo, float hi, Generator& gen);  // fills in order

}  // namespace rf::nn
