// A training step waits for nothing: with a counting runtime installed for the CPU, full
// steps of an MLP and of a small CNN (forward, cross-entropy, backward, SGD with momentum)
// ask for no synchronisation, no blocking read and no fence wait, and after the first step
// obtain no fresh memory; reading the loss is then exactly one read.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "core/device_runtime.h"
#include "core/nn/layers.h"
#include "core/nn/sequential.h"
#include "core/ops.h"
#include "core/optim/sgd.h"
#include "core/random.h"

using namespace rf;

namespace {

// Forwards everything to the CPU runtime and counts what passes through it.
class CountingRuntime final : public DeviceRuntime {
 public:
  explicit CountingRuntime(DeviceRuntime& inner) : inner_(inner) {}
  Device device() const override { return inner_.device(); }
  const kernels::OpTable& ops() const override { return inner_.ops(); }
  DeviceAllocator& allocator() override { return inner_.allocator(); }
  kernels::Stream stream() const override { return inner_.stream(); }
  void write(void* dst, const void* src, size_t bytes) override {
    ++writes;
    inner_.write(dst, src, bytes);
  }
  void read(void* dst, const void* src, size_t bytes) override {
    ++reads_;
    inner_.read(dst, src, bytes);
  }
  void read_async(void* dst, const void* src, size_t bytes) override { inner_.read_async(dst, src, bytes); }
  void record(Fence& f) override { inner_.record(f); }
  void wait(Fence& f) override {
    ++fence_waits_;
    inner_.wait(f);
  }
  void synchronize() override {
    ++synchronize_;
    inner_.synchronize();
  }
  void* host_staging(size_t bytes) override { return inner_.host_staging(bytes); }
  void free_host_staging(void* p, size_t bytes) override { inner_.free_host_staging(p, bytes); }
  SyncCounts sync_counts() const override { return {synchronize_.load(), reads_.load(), fence_waits_.load()}; }

  std::atomic<int64_t> writes{0};

 private:
  DeviceRuntime& inner_;
  std::atomic<int64_t> synchronize_{0}, reads_{0}, fence_waits_{0};
};

bool same(const SyncCounts& a, const SyncCounts& b) {
  return a.synchronize == b.synchronize && a.reads == b.reads && a.fence_waits == b.fence_waits;
}

// Runs `steps` full steps of `model` on a fixed batch and checks the counts.
void check_steps(nn::Sequential& model, const Shape& input, int64_t classes) {
  CountingRuntime counting(runtime(Device::CPU));
  RuntimeOverride installed(counting);
  REQUIRE(&runtime(Device::CPU) == &counting);

  Generator gen(7);
  std::vector<float> xs(static_cast<size_t>(input.numel()));
  for (float& v : xs) v = gen.uniform(-1.0f, 1.0f);
  const Tensor x = Tensor::from(input, xs);
  std::vector<int32_t> labels(static_cast<size_t>(input[0]));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % static_cast<size_t>(classes));
  optim::SGD sgd(model.named_parameters(), {.lr = 0.01f, .momentum = 0.9f});

  Tensor loss;
  auto step = [&] {
    sgd.zero_grad();
    loss = cross_entropy(model.forward(x), labels, Reduction::Sum);
    loss.backward();
    sgd.step();
  };
  step();  // the first step allocates gradients and fills the allocator's cache
  const SyncCounts before = counting.sync_counts();
  const size_t fresh = counting.allocator().stats().fresh_blocks;
  const int64_t writes = counting.writes.load();
  for (int i = 0; i < 3; ++i) step();
  const SyncCounts after = counting.sync_counts();
  CHECK_MESSAGE(same(before, after), "a step waited: synchronize ", after.synchronize - before.synchronize,
                ", reads ", after.reads - before.reads, ", fence waits ", after.fence_waits - before.fence_waits);
  CHECK(counting.allocator().stats().fresh_blocks == fresh);
  CHECK(counting.writes.load() == writes + 3);  // the labels, once a step: the runtime is in use

  const float v = loss.item();
  CHECK(counting.sync_counts().reads == after.reads + 1);
  CHECK(counting.sync_counts().synchronize == after.synchronize);
  CHECK(v > 0.0f);
}

}  // namespace

TEST_CASE("an MLP step asks the device for no synchronisation and no memory") {
  Generator g(1);
  nn::Sequential m;
  m.emplace<nn::Flatten>()
      .emplace<nn::Linear>(48, 32, g)
      .emplace<nn::ReLU>()
      .emplace<nn::Linear>(32, 24, g)
      .emplace<nn::ReLU>()
      .emplace<nn::Linear>(24, 10, g);
  check_steps(m, {16, 3, 4, 4}, 10);
}

TEST_CASE("a CNN step asks the device for no synchronisation and no memory") {
  Generator g(2);
  nn::Sequential m;
  m.emplace<nn::Conv2d>(1, 8, 5, g, 1, 2)  // the direct route
      .emplace<nn::ReLU>()
      .emplace<nn::MaxPool2d>(2)
      .emplace<nn::Conv2d>(8, 6, 3, g, 2, 1)  // stride 2: im2col + GEMM
      .emplace<nn::ReLU>()
      .emplace<nn::Flatten>()
      .emplace<nn::Linear>(6 * 4 * 4, 10, g);
  check_steps(m, {4, 1, 14, 14}, 10);
}
