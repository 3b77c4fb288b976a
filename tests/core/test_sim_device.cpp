// The simulated device (sim_device.h): tensors move to cuda:0 and back bitwise, ops run
// there through its runtime, and what blocks is counted there.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "base/error.h"
#include "core/host_view.h"
#include "core/ops.h"
#include "core/random.h"
#include "tests/core/sim_device.h"

using namespace rf;

namespace {
std::vector<float> randoms(size_t n, uint64_t seed) {
  Generator g(seed);
  std::vector<float> v(n);
  for (float& x : v) x = g.uniform(-3.0f, 3.0f);
  return v;
}
bool bitwise_equal(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}
}  // namespace

TEST_CASE("Tensor::to the simulated device and back is bitwise the same") {
  testing::ScopedSimDevice sim;
  const std::vector<float> v = randoms(1000, 3);
  const Tensor x = Tensor::from({10, 100}, v);
  const Tensor d = x.to(Device::CUDA);
  CHECK(d.device() == Device::CUDA);
  CHECK(d.shape() == x.shape());
  CHECK(d.data() != x.data());
  CHECK(x.to(Device::CPU).data() == x.data());  // same device: the tensor itself
  CHECK(sim.rt.sync_counts().reads == 0);
  const Tensor back = d.to(Device::CPU);
  CHECK(back.device() == Device::CPU);
  CHECK(sim.rt.sync_counts().reads == 1);
  CHECK(bitwise_equal(back.values(), v));

  std::vector<float> scratch;
  CHECK(bitwise_equal(host_view(d, scratch), v));
  CHECK(sim.rt.sync_counts().reads == 2);
  CHECK(host_view(x, scratch).data() == x.data());  // a CPU tensor is viewed, not copied
}

TEST_CASE("ops on the simulated device match the CPU's bits and block only where asked") {
  testing::ScopedSimDevice sim;
  const Tensor a = Tensor::from({8, 12}, randoms(96, 4));
  const Tensor w = Tensor::from({5, 12}, randoms(60, 5)).set_requires_grad(true);
  const std::vector<int32_t> labels{0, 1, 2, 3, 4, 0, 1, 2};
  const Tensor loss = cross_entropy(relu(matmul(a, w, false, true)), labels);
  loss.backward();

  Tensor wd = w.detach().to(Device::CUDA);
  wd.set_requires_grad(true);
  const Tensor ad = a.to(Device::CUDA);
  const Tensor loss_d = cross_entropy(relu(matmul(ad, wd, false, true)), labels);
  CHECK(loss_d.device() == Device::CUDA);
  loss_d.backward();
  CHECK(sim.rt.sync_counts().reads == 0);  // nothing above read the device
  CHECK(sim.rt.writes.load() > 0);         // the labels went to it
  const float l = loss_d.item();
  CHECK(sim.rt.sync_counts().reads == 1);
  CHECK(std::memcmp(&l, loss.data(), sizeof l) == 0);
  CHECK(bitwise_equal(wd.grad().to(Device::CPU).values(), w.grad().values()));
  CHECK_THROWS_AS(matmul(a, wd, false, true), InvalidInput);  // devices differ
}

TEST_CASE("runtime overrides nest and restore what was installed before") {
  testing::ScopedSimDevice outer;
  CHECK(&runtime(Device::CUDA) == &outer.rt);
  {
    testing::ScopedSimDevice inner;
    CHECK(&runtime(Device::CUDA) == &inner.rt);
    CHECK(&runtime(Device::CPU) != &inner.rt);  // only its own device
  }
  CHECK(&runtime(Device::CUDA) == &outer.rt);
}
