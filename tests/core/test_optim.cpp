// Optimizer updates against values computed by hand from PyTorch's update rules.
#include <doctest/doctest.h>

#include "core/optim/adamw.h"
#include "core/optim/sgd.h"

using namespace rf;

namespace {
// One scalar parameter p = 1 whose gradient we set directly before each step.
struct Scalar {
  Tensor p;
  Scalar() : p(Tensor::full({1}, 1.0f)) {
    p.set_requires_grad(true);
    p.zero_grad();
  }
  void grad(float g) { p.grad().data()[0] = g; }
  float value() const { return p.data()[0]; }
};

std::vector<float> run_sgd(optim::SgdOptions o, int steps) {
  Scalar s;
  optim::SGD opt({{"p", s.p}}, o);
  std::vector<float> out;
  for (int i = 0; i < steps; ++i) {
    s.grad(0.5f);
    opt.step();
    out.push_back(s.value());
  }
  return out;
}
}  // namespace

TEST_CASE("SGD plain and with weight decay") {
  auto v = run_sgd({.lr = 0.1f}, 2);
  CHECK(v[0] == doctest::Approx(0.95f).epsilon(1e-6));
  CHECK(v[1] == doctest::Approx(0.90f).epsilon(1e-6));
  // d = 0.5 + 0.1 * p
  v = run_sgd({.lr = 0.1f, .weight_decay = 0.1f}, 1);
  CHECK(v[0] == doctest::Approx(0.94f).epsilon(1e-6));
}

TEST_CASE("SGD momentum: the buffer is the gradient itself on the first step") {
  auto v = run_sgd({.lr = 0.1f, .momentum = 0.9f}, 2);
  CHECK(v[0] == doctest::Approx(0.95f).epsilon(1e-6));   // buf = 0.5
  CHECK(v[1] == doctest::Approx(0.855f).epsilon(1e-6));  // buf = 0.9*0.5 + 0.5 = 0.95
}

TEST_CASE("SGD momentum with dampening") {
  auto v = run_sgd({.lr = 0.1f, .momentum = 0.9f, .dampening = 0.5f}, 2);
  CHECK(v[0] == doctest::Approx(0.95f).epsilon(1e-6));  // first step: no dampening
  CHECK(v[1] == doctest::Approx(0.88f).epsilon(1e-6));  // buf = 0.45 + 0.5*0.5 = 0.7
}

TEST_CASE("SGD nesterov") {
  auto v = run_sgd({.lr = 0.1f, .momentum = 0.9f, .nesterov = true}, 2);
  CHECK(v[0] == doctest::Approx(0.905f).epsilon(1e-6));   // d = 0.5 + 0.9*0.5
  CHECK(v[1] == doctest::Approx(0.7695f).epsilon(1e-6));  // buf = 0.95, d = 0.5 + 0.855
  CHECK_THROWS(run_sgd({.lr = 0.1f, .momentum = 0.0f, .nesterov = true}, 1));
}

TEST_CASE("SGD buffers and counters by name") {
  Scalar s;
  optim::SGD opt({{"w", s.p}}, {.lr = 0.1f, .momentum = 0.9f});
  s.grad(0.5f);
  opt.step();
  auto b = opt.named_buffers();
  REQUIRE(b.size() == 1);
  CHECK(b[0].first == "w.momentum_buffer");
  CHECK(b[0].second.data()[0] == 0.5f);
  CHECK(opt.named_counters() == std::vector<optim::NamedCounter>{{"w.step", 1}});
}

TEST_CASE("AdamW: two steps against the hand computation") {
  Scalar s;
  optim::AdamW opt({{"p", s.p}}, {.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                                  .weight_decay = 0.01f});
  s.grad(0.5f);
  opt.step();
  // p = 0.999; m = 0.05; v = 0.00025; m_hat = 0.5; sqrt(v_hat) = 0.5; p -= 0.1 * 1
  CHECK(s.value() == doctest::Approx(0.899f).epsilon(1e-6));
  s.grad(0.5f);
  opt.step();
  // p = 0.899*0.999; m = 0.095, m_hat = 0.5; v_hat = 0.25: p -= 0.1
  CHECK(s.value() == doctest::Approx(0.899f * 0.999f - 0.1f).epsilon(1e-6));
  auto b = opt.named_buffers();
  REQUIRE(b.size() == 2);
  CHECK(b[0].first == "p.exp_avg");
  CHECK(b[0].second.data()[0] == doctest::Approx(0.095f).epsilon(1e-6));
  CHECK(b[1].first == "p.exp_avg_sq");
  CHECK(b[1].second.data()[0] == doctest::Approx(0.00049975f).epsilon(1e-6));
  CHECK(opt.named_counters()[0].second == 2);
}
