// Every op's backward against central finite differences. Each scalar is sum(op(...) * R)
// with a fixed random R, so every output element's gradient path is exercised with a
// different weight.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "base/error.h"
#include "core/ops.h"
#include "tests/core/gradcheck.h"

using namespace rf;
using rf::test::gradcheck;
using rf::test::random_tensor;

TEST_CASE("matmul backward, all four transpose combinations") {
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      CAPTURE(ta);
      CAPTURE(tb);
      Generator g(1 + ta * 2 + tb);
      // op(A) is 3x4, op(B) is 4x5
      Tensor a = random_tensor(ta ? Shape{4, 3} : Shape{3, 4}, g);
      Tensor b = random_tensor(tb ? Shape{5, 4} : Shape{4, 5}, g);
      Tensor r = random_tensor({3, 5}, g);
      gradcheck([&](const std::vector<Tensor>& in) {
        return sum(mul(matmul(in[0], in[1], ta, tb), r));
      }, {a, b});
    }
  }
}

TEST_CASE("add, mul and sum backward") {
  Generator g(7);
  Tensor a = random_tensor({2, 3}, g), b = random_tensor({2, 3}, g), r = random_tensor({2, 3}, g);
  gradcheck([&](const std::vector<Tensor>& in) { return sum(mul(add(in[0], in[1]), r)); }, {a, b});
  gradcheck([&](const std::vector<Tensor>& in) { return sum(mul(in[0], in[1])); }, {a, b});
}

TEST_CASE("add_bias backward: rows and channels") {
  Generator g(8);
  Tensor r2 = random_tensor({4, 3}, g);
  gradcheck([&](const std::vector<Tensor>& in) { return sum(mul(add_bias(in[0], in[1]), r2)); },
            {random_tensor({4, 3}, g), random_tensor({3}, g)});
  Tensor r4 = random_tensor({2, 3, 2, 2}, g);
  gradcheck([&](const std::vector<Tensor>& in) { return sum(mul(add_bias(in[0], in[1]), r4)); },
            {random_tensor({2, 3, 2, 2}, g), random_tensor({3}, g)});
}

TEST_CASE("relu backward (inputs away from the kink)") {
  Generator g(9);
  Tensor x = random_tensor({3, 4}, g);
  for (float& v : x.values()) v = v < 0 ? v - 0.1f : v + 0.1f;  // |x| >= 0.1 > h
  Tensor r = random_tensor({3, 4}, g);
  gradcheck([&](const std::vector<Tensor>& in) { return sum(mul(relu(in[0]), r)); }, {x});
}

TEST_CASE("conv2d backward: stride 1 pad 2, stride 2 pad 1, no bias") {
  struct Case { int64_t stride, padding; bool bias; };
  for (Case c : {Case{1, 2, true}, Case{2, 1, true}, Case{1, 0, false}}) {
    CAPTURE(c.stride);
    CAPTURE(c.padding);
    Generator g(10 + c.stride);
    Tensor x = random_tensor({2, 2, 5, 6}, g);
    Tensor w = random_tensor({3, 2, 3, 3}, g);
    Tensor b = random_tensor({3}, g);
    Generator gr(99);
    Tensor probe = conv2d(x, w, c.bias ? b : Tensor(), c.stride, c.padding);
    Tensor r = random_tensor(probe.shape(), gr);
    std::vector<Tensor> ins{x, w};
    if (c.bias) ins.push_back(b);
    gradcheck([&](const std::vector<Tensor>& in) {
      return sum(mul(conv2d(in[0], in[1], c.bias ? in[2] : Tensor(), c.stride, c.padding), r));
    }, ins);
  }
}

TEST_CASE("max_pool2d backward (distinct values, no ties)") {
  Tensor x = Tensor::empty({2, 2, 4, 6});
  // A permutation of well-separated values so no perturbation changes a winner.
  for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] = static_cast<float>((i * 37) % 96) * 0.1f;
  Generator g(11);
  Tensor r = random_tensor({2, 2, 2, 3}, g);
  gradcheck([&](const std::vector<Tensor>& in) { return sum(mul(max_pool2d(in[0], 2), r)); }, {x});
  Tensor r3 = random_tensor({2, 2, 1, 2}, g);
  gradcheck([&](const std::vector<Tensor>& in) { return sum(mul(max_pool2d(in[0], 3), r3)); }, {x});
}

TEST_CASE("reshape and flatten backward") {
  Generator g(12);
  Tensor x = random_tensor({2, 3, 2, 2}, g);
  Tensor r = random_tensor({2, 12}, g);
  gradcheck([&](const std::vector<Tensor>& in) { return sum(mul(flatten(in[0]), r)); }, {x});
  Tensor r2 = random_tensor({6, 4}, g);
  gradcheck([&](const std::vector<Tensor>& in) { return sum(mul(reshape(in[0], {6, 4}), r2)); }, {x});
}

TEST_CASE("log_softmax backward") {
  Generator g(13);
  Tensor x = random_tensor({3, 5}, g, -2.0f, 2.0f);
  Tensor r = random_tensor({3, 5}, g);
  gradcheck([&](const std::vector<Tensor>& in) { return sum(mul(log_softmax(in[0]), r)); }, {x},
            1e-2f, 2e-3, 2e-2);
}

TEST_CASE("cross_entropy backward, sum and mean") {
  Generator g(14);
  std::vector<int32_t> labels{0, 4, 2, 1};
  for (Reduction red : {Reduction::Sum, Reduction::Mean}) {
    Tensor x = random_tensor({4, 5}, g, -2.0f, 2.0f);
    gradcheck([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], labels, red); }, {x},
              1e-2f, 2e-3, 2e-2);
  }
}

TEST_CASE("cross_entropy values: mean = sum / N, and the known value for uniform logits") {
  Tensor x = Tensor::zeros({4, 10});
  std::vector<int32_t> labels{0, 1, 2, 3};
  CHECK(cross_entropy(x, labels, Reduction::Mean).item() == doctest::Approx(std::log(10.0)).epsilon(1e-6));
  CHECK(cross_entropy(x, labels, Reduction::Sum).item() == doctest::Approx(4 * std::log(10.0)).epsilon(1e-6));
}

TEST_CASE("cross_entropy with the labels already on the device: the host labels' loss and gradient, bit for bit") {
  Generator g(16);
  const std::vector<int32_t> labels{0, 4, 2, 1};
  auto on_device = Storage::allocate(sizeof(int32_t) * labels.size());
  std::copy(labels.begin(), labels.end(), on_device->data<int32_t>());
  for (Reduction red : {Reduction::Sum, Reduction::Mean}) {
    Tensor x = random_tensor({4, 5}, g, -2.0f, 2.0f);
    x.set_requires_grad(true);
    Tensor a = cross_entropy(x, labels, red);
    a.backward();
    const std::vector<float> grad_host(x.grad().values().begin(), x.grad().values().end());
    x.zero_grad();
    Tensor b = cross_entropy(x, on_device, red);
    b.backward();
    CHECK(a.item() == b.item());
    CHECK(std::vector<float>(x.grad().values().begin(), x.grad().values().end()) == grad_host);
  }
  Tensor x = Tensor::zeros({5, 5});
  CHECK_THROWS_WITH_AS(cross_entropy(x, on_device), "nll_loss: device labels hold fewer than 5 rows", rf::InvalidInput);
  CHECK_THROWS_AS(cross_entropy(x, std::shared_ptr<Storage>()), rf::InvalidInput);
}

TEST_CASE("a small MLP end to end against finite differences") {
  Generator g(15);
  Tensor x = random_tensor({3, 4}, g);
  std::vector<int32_t> labels{1, 0, 2};
  gradcheck([&](const std::vector<Tensor>& in) {
    Tensor h = relu(add_bias(matmul(x, in[0], false, true), in[1]));
    return cross_entropy(add_bias(matmul(h, in[2], false, true), in[3]), labels);
  }, {random_tensor({5, 4}, g), random_tensor({5}, g, 0.2f, 1.0f), random_tensor({3, 5}, g),
      random_tensor({3}, g)}, 1e-3f, 2e-3, 2e-2);
}

TEST_CASE("a small CNN end to end: conv, relu, pool, conv, flatten, linear") {
  // Exercises every rule's "first writer" path (fresh intermediate gradients) in a chain.
  Generator g(16);
  std::vector<int32_t> labels{2, 0};
  gradcheck([&](const std::vector<Tensor>& in) {
    Tensor h = max_pool2d(relu(conv2d(in[0], in[1], in[2], 1, 1)), 2);
    Tensor h2 = relu(conv2d(h, in[3], Tensor(), 1, 1));
    return cross_entropy(matmul(flatten(h2), in[4], false, true), labels);
  }, {random_tensor({2, 1, 6, 6}, g), random_tensor({3, 1, 3, 3}, g), random_tensor({3}, g),
      random_tensor({2, 3, 3, 3}, g), random_tensor({3, 18}, g)}, 1e-3f, 3e-3, 3e-2);
}

TEST_CASE("an intermediate used by two different ops: overwrite, then accumulate") {
  Generator g(17);
  Tensor r1 = random_tensor({3, 4}, g), r2 = random_tensor({3, 4}, g);
  gradcheck([&](const std::vector<Tensor>& in) {
    Tensor h = matmul(in[0], in[1]);
    return add(sum(mul(relu(h), r1)), sum(mul(reshape(h, {3, 4}), r2)));
  }, {random_tensor({3, 5}, g), random_tensor({5, 4}, g)}, 1e-3f, 3e-3, 3e-2);
}
