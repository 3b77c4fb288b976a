// The state S on a device — the simulated cuda:0 of tests/core/sim_device.h — through the
// one host-staging path (ckpt/host_staging.h): its digest, its image and a restore give
// the CPU's bits; an image written from the device restores onto the CPU and the other way
// round with the same digest; the device is read once per tensor (explicit, counted
// reads, never a synchronize) into pinned staging that is reused.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "ckpt/host_staging.h"
#include "ckpt/state.h"
#include "core/nn/layers.h"
#include "core/nn/sequential.h"
#include "core/ops.h"
#include "core/optim/adamw.h"
#include "core/optim/sgd.h"
#include "core/random.h"
#include "core/state_digest.h"
#include "tests/ckpt/device_twin.h"
#include "tests/core/sim_device.h"

using namespace rf;
using Bytes = std::vector<std::byte>;

namespace {

std::shared_ptr<nn::Sequential> tiny_model(uint64_t seed) {
  Generator g(seed);
  auto m = std::make_shared<nn::Sequential>();
  m->emplace<nn::Linear>(4, 6, g).emplace<nn::ReLU>().emplace<nn::Linear>(6, 3, g);
  return m;
}

// Real steps on the model's device, so the buffers and counters are non-trivial.
void train_steps(nn::Module& m, optim::Optimizer& opt, int steps, uint64_t seed, Device device) {
  Generator g(seed);
  std::vector<float> x(8 * 4);
  std::vector<int32_t> y(8);
  for (int s = 0; s < steps; ++s) {
    for (auto& v : x) v = static_cast<float>(g.next_u64() % 1000) / 500.0f - 1.0f;
    for (auto& v : y) v = static_cast<int32_t>(g.next_u64() % 3);
    opt.zero_grad();
    Tensor loss = cross_entropy(m(Tensor::from({8, 4}, x, device)), y);
    loss.backward();
    opt.step();
  }
}

ckpt::SnapshotMeta meta(int64_t step, const char* optimizer) {
  return {.model = "tiny", .step = step, .generation = 3, .world_size = 2, .optimizer = optimizer};
}

size_t tensors_of(const nn::Module& m, const optim::Optimizer& o) {
  return m.named_parameters().size() + o.named_buffers().size();
}

std::unique_ptr<optim::Optimizer> make_optimizer(const std::string& kind, const nn::Module& m) {
  if (kind == "sgd") return std::make_unique<optim::SGD>(m.named_parameters(), optim::SgdOptions{.lr = 0.1f, .momentum = 0.9f});
  return std::make_unique<optim::AdamW>(m.named_parameters(), optim::AdamWOptions{.lr = 0.01f});
}

}  // namespace

TEST_CASE("a device's state: the CPU's digest and image bytes; images cross between the CPU and the device") {
  for (const std::string kind : {"sgd", "adamw"}) {
    CAPTURE(kind);
    testing::ScopedSimDevice sim;
    // The reference: trained on the CPU.
    auto cpu = tiny_model(1);
    auto cpu_opt = make_optimizer(kind, *cpu);
    train_steps(*cpu, *cpu_opt, 3, 5, Device::CPU);
    const std::string digest = ckpt::state_digest_of(*cpu, *cpu_opt);
    CHECK(digest == state_digest(*cpu, *cpu_opt));  // core's definition
    Bytes image;
    ckpt::serialize_state(*cpu, *cpu_opt, meta(3, kind.c_str()), image);

    // The same training on the device gives the same state: digest and image bytes.
    testing::DeviceTwin dev(*tiny_model(1), Device::CUDA);
    auto dev_opt = make_optimizer(kind, dev);
    train_steps(dev, *dev_opt, 3, 5, Device::CUDA);
    const size_t n = tensors_of(dev, *dev_opt);
    ckpt::HostStaging staging;
    SyncCounts c0 = sim.rt.sync_counts();
    CHECK(ckpt::state_digest_of(dev, *dev_opt, &staging) == digest);
    SyncCounts c1 = sim.rt.sync_counts();
    CHECK(c1.reads - c0.reads == static_cast<int64_t>(n));  // one explicit read per tensor
    CHECK(c1.synchronize == c0.synchronize);
    CHECK(c1.fence_waits == c0.fence_waits);
    const size_t held = staging.capacity();
    CHECK(held >= sizeof(float) * 4 * 6);
    Bytes from_dev;
    ckpt::serialize_state(dev, *dev_opt, meta(3, kind.c_str()), from_dev, {}, &staging);
    SyncCounts c2 = sim.rt.sync_counts();
    CHECK(from_dev == image);                                // an image records no device
    CHECK(c2.reads - c1.reads == static_cast<int64_t>(n));  // digest and image from one read each
    CHECK(c2.synchronize == c1.synchronize);
    CHECK(staging.capacity() == held);  // reused, not grown
    CHECK(state_digest(dev, *dev_opt) == digest);  // core's host_view path agrees

    // Device image -> a fresh CPU state; CPU image -> a fresh device state.
    auto back = tiny_model(7);
    auto back_opt = make_optimizer(kind, *back);
    std::string swapped;
    ckpt::restore_state(from_dev, *back, *back_opt, {.step = 3, .digest = digest}, "device image", &swapped);
    CHECK(swapped == digest);
    CHECK(ckpt::state_digest_of(*back, *back_opt) == digest);

    testing::DeviceTwin fresh(*tiny_model(8), Device::CUDA);
    auto fresh_opt = make_optimizer(kind, fresh);
    CHECK(ckpt::state_digest_of(fresh, *fresh_opt) != digest);
    const int64_t writes = sim.rt.writes.load();
    c0 = sim.rt.sync_counts();
    ckpt::restore_state(image, fresh, *fresh_opt, {.step = 3, .digest = digest}, "cpu image", &swapped);
    c1 = sim.rt.sync_counts();
    CHECK(swapped == digest);
    CHECK(sim.rt.writes.load() - writes == static_cast<int64_t>(n));  // written back, one write each
    CHECK(c1.reads == c0.reads);  // a restore reads nothing from the device
    CHECK(c1.synchronize == c0.synchronize);
    CHECK(ckpt::state_digest_of(fresh, *fresh_opt) == digest);
    // ...and it trains on from there exactly as the CPU state does.
    train_steps(fresh, *fresh_opt, 2, 9, Device::CUDA);
    train_steps(*cpu, *cpu_opt, 2, 9, Device::CPU);
    CHECK(ckpt::state_digest_of(fresh, *fresh_opt) == ckpt::state_digest_of(*cpu, *cpu_opt));
  }
}

TEST_CASE("StateCopy of a device's state: a copy (later training does not change it), the CPU's image") {
  testing::ScopedSimDevice sim;
  auto cpu = tiny_model(2);
  optim::SGD cpu_opt(cpu->named_parameters(), {.lr = 0.1f, .momentum = 0.9f});
  train_steps(*cpu, cpu_opt, 2, 4, Device::CPU);
  Bytes want;
  ckpt::serialize_state(*cpu, cpu_opt, meta(2, "sgd"), want);

  testing::DeviceTwin dev(*tiny_model(2), Device::CUDA);
  optim::SGD dev_opt(dev.named_parameters(), {.lr = 0.1f, .momentum = 0.9f});
  train_steps(dev, dev_opt, 2, 4, Device::CUDA);
  ckpt::StateCopy copy;
  const SyncCounts c0 = sim.rt.sync_counts();
  copy.capture(dev, dev_opt, meta(2, "sgd"));
  const SyncCounts c1 = sim.rt.sync_counts();
  CHECK(c1.reads - c0.reads == static_cast<int64_t>(tensors_of(dev, dev_opt)));  // once each, digest included
  CHECK(c1.synchronize == c0.synchronize);
  train_steps(dev, dev_opt, 1, 6, Device::CUDA);  // the live state moves on
  Bytes got;
  copy.serialize(got);
  CHECK(got == want);
}

TEST_CASE("HostStaging views CPU tensors in place and checks write-back sizes") {
  testing::ScopedSimDevice sim;
  const Tensor a = Tensor::full({5}, 1.5f), d = Tensor::full({3}, 2.5f, Device::CUDA);
  ckpt::HostStaging staging;
  const std::vector<Tensor> cpu_only{a};
  auto v = staging.stage(cpu_only);
  CHECK(static_cast<const void*>(v[0].data()) == static_cast<const void*>(a.data()));  // no copy
  CHECK(staging.capacity() == 0);
  const std::vector<Tensor> both{a, d};
  v = staging.stage(both);
  CHECK(static_cast<const void*>(v[1].data()) != static_cast<const void*>(d.data()));  // a host copy
  REQUIRE(v[1].size() == 3 * sizeof(float));
  float got[3];
  std::memcpy(got, v[1].data(), sizeof got);
  CHECK(got[2] == 2.5f);
  const float three[3] = {7.0f, 8.0f, 9.0f};
  ckpt::HostStaging::write_back(d, std::as_bytes(std::span<const float>(three)));
  CHECK(d.to(Device::CPU).values()[1] == 8.0f);
  CHECK_THROWS_WITH_AS(ckpt::HostStaging::write_back(d, std::as_bytes(std::span<const float>(three, 2))),
                       doctest::Contains("8 bytes for a tensor of 12"), InvalidInput);
}
