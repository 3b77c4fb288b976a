#include "models/reference.h"

#include "core/nn/layers.h"
#include "core/random.h"

namespace rf::models {

const char* model_name(ModelKind kind) { return kind == ModelKind::MLP ? "mlp" : "cnn"; }

std::shared_ptr<nn::Sequential> make_mlp(uint64_t seed) {
  Generator g(seed);
  auto m = std::make_shared<nn::Sequential>();
  m->emplace<nn::Flatten>()
      .emplace<nn::Linear>(784, 512, g)
      .emplace<nn::ReLU>()
      .emplace<nn::Linear>(512, 512, g)
      .emplace<nn::ReLU>()
      .emplace<nn::Linear>(512, 10, g);
  return m;
}

std::shared_ptr<nn::Sequential> make_cnn(uint64_t seed) {
  Generator g(seed);
  auto m = std::make_shared<nn::Sequential>();
  m->emplace<nn::Conv2d>(1, 16, 5, g, 1, 2)
      .emplace<nn::ReLU>()
      .emplace<nn::MaxPool2d>(2)
      .emplace<nn::Conv2d>(16, 32, 5, g, 1, 2)
      .emplace<nn::ReLU>()
      .emplace<nn::MaxPool2d>(2)
      .emplace<nn::Flatten>()
      .emplace<nn::Linear>(1568, 128, g)
      .emplace<nn::ReLU>()
      .emplace<nn::Linear>(128, 10, g);
  return m;
}

std::shared_ptr<nn::Sequential> make_model(ModelKind kind, uint64_t seed) {
  return kind == ModelKind::MLP ? make_mlp(seed) : make_cnn(seed);
}

}  // namespace rf::models
