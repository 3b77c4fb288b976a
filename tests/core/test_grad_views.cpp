// The contract the ddp layer builds on, checked on a real model: every parameter's
// gradient pointed into one flat bucket buffer, hooks that fire once per parameter with
// the final gradient, and results bitwise equal to the model with its own gradients.
#include <doctest/doctest.h>

#include <cstring>
#include <map>
#include <vector>

#include "core/nn/layers.h"
#include "core/nn/sequential.h"
#include "core/ops.h"
#include "core/random.h"

using namespace rf;

namespace {
std::shared_ptr<nn::Sequential> small_cnn() {
  Generator g(3);
  auto m = std::make_shared<nn::Sequential>();
  m->emplace<nn::Conv2d>(1, 4, 3, g, 1, 1)
      .emplace<nn::ReLU>()
      .emplace<nn::MaxPool2d>(2)
      .emplace<nn::Flatten>()
      .emplace<nn::Linear>(4 * 4 * 4, 10, g);
  return m;
}

Tensor loss_of(nn::Module& m) {
  Generator g(4);
  Tensor x = Tensor::empty({5, 1, 8, 8});
  for (float& v : x.values()) v = g.uniform(-1.0f, 1.0f);
  std::vector<int32_t> labels{1, 3, 5, 7, 9};
  return cross_entropy(m(x), labels, Reduction::Sum);
}
}  // namespace

TEST_CASE("gradients as views into one flat bucket: same values, hooks see them final") {
  auto own = small_cnn();
  auto viewed = small_cnn();
  auto params = viewed->named_parameters();
  int64_t total = 0;
  for (auto& [n, p] : params) total += p.numel();
  // Reverse registration order, as the reducer lays out its buckets (last layer first).
  std::vector<float> bucket(total, 123.0f);
  int64_t offset = 0;
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    it->second.set_grad_view(bucket.data() + offset, it->second.numel());
    offset += it->second.numel();
  }
  viewed->zero_grad();
  std::map<std::string, int> fired;
  std::map<std::string, std::vector<float>> at_hook;
  for (auto& [name, p] : params) {
    p.register_hook([&, name = name](const Tensor& t) {
      ++fired[name];
      at_hook[name].assign(t.grad().values().begin(), t.grad().values().end());
    });
  }
  for (int round = 0; round < 2; ++round) {  // two backwards accumulate
    loss_of(*own).backward();
    loss_of(*viewed).backward();
  }
  auto ref = own->named_parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string& name = params[i].first;
    CAPTURE(name);
    Tensor g = params[i].second.grad();
    CHECK(g.data() >= bucket.data());
    CHECK(g.data() < bucket.data() + total);
    CHECK(std::memcmp(g.data(), ref[i].second.grad().data(), sizeof(float) * g.numel()) == 0);
    CHECK(fired[name] == 2);
    CHECK(at_hook[name] == std::vector<float>(g.values().begin(), g.values().end()));
  }
}
