#pragma once
// The small model and data of the ddp tests: an MLP on synthetic 1x8x8 images, so a
// multi-process run of tens of steps takes well under a second of compute.
#include <cstdint>
#include <memory>
#include <span>

#include "core/data/dataset.h"
#include "core/nn/layers.h"
#include "core/nn/sequential.h"
#include "core/ops.h"
#include "core/random.h"

namespace rf::ddp::testing {

inline std::shared_ptr<nn::Sequential> make_test_mlp(uint64_t seed, int64_t hidden) {
  Generator g(seed);
  auto m = std::make_shared<nn::Sequential>();
  m->emplace<nn::Flatten>()
      .emplace<nn::Linear>(64, hidden, g)
      .emplace<nn::ReLU>()
      .emplace<nn::Linear>(hidden, hidden, g)
      .emplace<nn::ReLU>()
      .emplace<nn::Linear>(hidden, 10, g);
  return m;
}

inline data::Dataset make_test_data(int64_t n, uint64_t seed) { return data::make_synthetic(n, 1, 8, 8, 10, seed); }

inline Tensor sum_loss(const Tensor& out, std::span<const int32_t> labels) {
  return cross_entropy(out, labels, Reduction::Sum);
}

}  // namespace rf::ddp::testing
