#pragma once
// The reference models, as PyTorch nn.Sequential would number them (so parameter names
// match and weights exported from torch load by name):
//   MLP: 0 Flatten, 1 Linear(784,512), 2 ReLU, 3 Linear(512,512), 4 ReLU, 5 Linear(512,10)
//   CNN: 0 Conv2d(1,16,5,pad 2), 1 ReLU, 2 MaxPool2d(2), 3 Conv2d(16,32,5,pad 2), 4 ReLU,
//        5 MaxPool2d(2), 6 Flatten, 7 Linear(1568,128), 8 ReLU, 9 Linear(128,10)
// Both take [N, 1, 28, 28] images and return [N, 10] logits. Every rank that builds a
// model from the same seed gets bitwise identical parameters.
#include <cstdint>
#include <memory>
#include <string>

#include "core/nn/sequential.h"

namespace rf::models {

enum class ModelKind { MLP, CNN };
constexpr int kReferenceClasses = 10;  // the width of both models' logits

const char* model_name(ModelKind kind);  // "mlp" / "cnn"
std::shared_ptr<nn::Sequential> make_mlp(uint64_t seed);
std::shared_ptr<nn::Sequential> make_cnn(uint64_t seed);
std::shared_ptr<nn::Sequential> make_model(ModelKind kind, uint64_t seed);

}  // namespace rf::models
