// The engine's contract: accumulation, final-gradient hooks, no-grad, graph release,
// missing rules, and gradients that live in external memory (the ddp bucket).
#include <doctest/doctest.h>

#include <vector>

#include "base/error.h"
#include "core/autograd.h"
#include "core/ops.h"

using namespace rf;

namespace {
Tensor param(const Shape& s, std::vector<float> v) {
  Tensor t = Tensor::from(s, v);
  t.set_requires_grad(true);
  return t;
}
}  // namespace

TEST_CASE("a tensor used twice gets the sum of both contributions") {
  Tensor x = param({3}, {1.0f, -2.0f, 3.0f});
  // y = sum(x * x) + sum(x)  ->  dy/dx = 2x + 1
  Tensor y = add(sum(mul(x, x)), sum(x));
  y.backward();
  CHECK(x.grad().data()[0] == 3.0f);
  CHECK(x.grad().data()[1] == -3.0f);
  CHECK(x.grad().data()[2] == 7.0f);
}

TEST_CASE("gradients accumulate across backward calls until zero_grad") {
  Tensor x = param({2}, {1.0f, 2.0f});
  sum(mul(x, x)).backward();
  sum(mul(x, x)).backward();
  CHECK(x.grad().data()[0] == 4.0f);
  CHECK(x.grad().data()[1] == 8.0f);
  x.zero_grad();
  CHECK(x.grad().data()[0] == 0.0f);
}

TEST_CASE("a hook fires once per backward, after every use has contributed") {
  Tensor w = param({2, 2}, {1, 2, 3, 4});
  Tensor x = Tensor::from({1, 2}, std::vector<float>{1.0f, 1.0f});
  int fired = 0;
  std::vector<float> seen;
  w.register_hook([&](const Tensor& p) {
    ++fired;
    seen.assign(p.grad().values().begin(), p.grad().values().end());
  });
  // w is used three times; its gradient is final only after the last use (the first in
  // forward order, reached last by the reverse walk) has contributed.
  Tensor h = matmul(x, w);                       // [1, 2]
  Tensor h2 = matmul(h, w);                      // uses w again
  Tensor y = add(sum(h2), sum(mul(w, w)));       // and a third time
  y.backward();
  CHECK(fired == 1);
  // Reference: the full gradient, read after backward returns.
  std::vector<float> final_grad(w.grad().values().begin(), w.grad().values().end());
  CHECK(seen == final_grad);
  fired = 0;
  Tensor y2 = sum(matmul(x, w));
  y2.backward();
  CHECK(fired == 1);
}

TEST_CASE("hooks of different parameters fire in reverse order of use") {
  Tensor a = param({1, 1}, {2.0f});
  Tensor b = param({1, 1}, {3.0f});
  std::vector<char> order;
  a.register_hook([&](const Tensor&) { order.push_back('a'); });
  b.register_hook([&](const Tensor&) { order.push_back('b'); });
  Tensor x = Tensor::from({1, 1}, std::vector<float>{1.0f});
  sum(matmul(matmul(x, a), b)).backward();
  CHECK(order == std::vector<char>{'b', 'a'});
}

TEST_CASE("no-grad scope records nothing, and restores the mode") {
  Tensor x = param({2}, {1.0f, 2.0f});
  {
    NoGradGuard ng;
    CHECK_FALSE(grad_enabled());
    Tensor y = sum(mul(x, x));
    CHECK_FALSE(y.requires_grad());
    CHECK(y.is_leaf());
    CHECK_THROWS_AS(y.backward(), InvalidInput);
  }
  CHECK(grad_enabled());
  CHECK(sum(mul(x, x)).requires_grad());
}

TEST_CASE("an op without a derivative rule is an error naming the op") {
  Tensor x = param({2}, {1.0f, 2.0f});
  Tensor y = make_result(Shape{}, "mystery_op", {x}, nullptr);
  y.data()[0] = 1.0f;
  try {
    y.backward();
    FAIL("backward through a rule-less op must throw");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("mystery_op") != std::string::npos);
  }
}

TEST_CASE("backward twice through the same graph is a clear error") {
  Tensor x = param({2}, {1.0f, 2.0f});
  Tensor y = sum(mul(x, x));
  y.backward();
  CHECK_THROWS_AS(y.backward(), Error);
}

TEST_CASE("backward needs a scalar") {
  Tensor x = param({2}, {1.0f, 2.0f});
  CHECK_THROWS_AS(mul(x, x).backward(), InvalidInput);
}

TEST_CASE("a gradient pointed at external memory is accumulated there in place") {
  // The ddp layer's flat bucket: two parameters' gradients side by side, with guards.
  std::vector<float> bucket(2 + 3 + 2, -7.0f);
  Tensor a = param({2}, {1.0f, 2.0f});
  Tensor b = param({3}, {1.0f, 1.0f, 1.0f});
  a.set_grad_view(bucket.data() + 1, 2);
  b.set_grad_view(bucket.data() + 3, 3);
  a.zero_grad();
  b.zero_grad();
  add(sum(mul(a, a)), sum(b)).backward();
  CHECK(bucket == std::vector<float>{-7, 2, 4, 1, 1, 1, -7});
  CHECK(a.grad().data() == bucket.data() + 1);  // a view, never reallocated
  add(sum(mul(a, a)), sum(b)).backward();
  CHECK(bucket == std::vector<float>{-7, 4, 8, 2, 2, 2, -7});
  CHECK_THROWS_AS(a.set_grad_view(bucket.data(), 3), InvalidInput);
}

TEST_CASE("set_grad_view on a shared storage with an offset") {
  auto storage = Storage::allocate(sizeof(float) * 8);
  Tensor w = param({2, 2}, {1, 2, 3, 4});
  w.set_grad_view(storage, 4);
  w.zero_grad();
  sum(w).backward();
  for (int i = 4; i < 8; ++i) CHECK(storage->data()[i] == 1.0f);
  CHECK_THROWS_AS(w.set_grad_view(storage, 5), InvalidInput);
}

TEST_CASE("inputs that do not require grad get no gradient") {
  Tensor w = param({2, 2}, {1, 2, 3, 4});
  Tensor x = Tensor::from({1, 2}, std::vector<float>{1.0f, 1.0f});
  sum(matmul(x, w)).backward();
  CHECK_FALSE(x.grad().defined());
  CHECK(w.grad().defined());
}
