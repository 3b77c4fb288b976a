// TrainState: the image (ckpt/state.h's snapshot bytes) round-trips bitwise, and an image
// that is damaged, cut, of another step or another digest is refused with the live state
// untouched (R6); and images cross between a replica on the CPU and one on a device.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "base/error.h"
#include "ckpt/safetensors_reader.h"
#include "ckpt/snapshot_meta.h"
#include "core/optim/sgd.h"
#include "core/state_digest.h"
#include "ddp/train_state.h"
#include "test_model.h"
#include "tests/ckpt/device_twin.h"
#include "tests/core/sim_device.h"

using namespace rf;
using rf::ddp::TrainState;

namespace {
optim::SgdOptions sgd_options() {
  optim::SgdOptions o;
  o.lr = 0.1f;
  o.momentum = 0.9f;
  return o;
}

struct Replica {
  std::shared_ptr<nn::Sequential> model;
  optim::SGD sgd;
  TrainState state;
  Replica() : model(ddp::testing::make_test_mlp(7, 16)), sgd(model->named_parameters(), sgd_options()), state(*model, sgd) {}
  void train_one(float scale) {
    for (auto& p : model->parameters()) {
      p.zero_grad();
      const Tensor grad = p.grad();  // a handle: the range below must not outlive it
      for (float& g : grad.values()) g = scale;
    }
    sgd.step();
  }
};
}  // namespace

TEST_CASE("image of a trained replica restores another bitwise, only with the right digest") {
  Replica a, b;
  a.train_one(0.5f);
  a.train_one(0.25f);
  a.state.set_step(1);
  CHECK(a.state.digest() != b.state.digest());
  std::vector<std::byte> img;
  a.state.write_image(2, 3, img);

  const std::string before = b.state.digest();
  CHECK_THROWS_AS(b.state.restore_verified(img, 1, before, "test"), rf::InvalidInput);  // wrong digest
  CHECK_THROWS_WITH_AS(b.state.restore_verified(img, 0, a.state.digest(), "test"), doctest::Contains("step"),
                       rf::InvalidInput);  // wrong step
  CHECK(b.state.digest() == before);
  CHECK(b.state.step() == -1);

  b.state.restore_verified(img, 1, a.state.digest(), "test");
  CHECK(b.state.step() == 1);
  CHECK(b.state.digest() == a.state.digest());
  CHECK(state_digest(*b.model, b.sgd) == state_digest(*a.model, a.sgd));
  // Same future: one more identical step keeps them equal (momentum and counters came too).
  a.train_one(1.0f);
  b.train_one(1.0f);
  CHECK(state_digest(*b.model, b.sgd) == state_digest(*a.model, a.sgd));
}

TEST_CASE("the image names the optimizer's algorithm as single-process snapshots do") {
  // train_mlp alone writes optimizer.kind() too, so its checkpoints and the Trainer's
  // resume each other (they once wrote "sgd" and "optimizer" and refused each other).
  Replica a;
  std::vector<std::byte> img;
  a.state.write_image(1, 2, img);
  const auto reader = rf::ckpt::SafetensorsReader::borrow(img, "test");
  CHECK(rf::ckpt::read_snapshot_meta(reader).optimizer == "sgd");
}

TEST_CASE("a damaged, cut or foreign image is refused and nothing changes (R6)") {
  Replica a, b;
  a.train_one(0.5f);
  a.state.set_step(0);
  std::vector<std::byte> img;
  a.state.write_image(1, 2, img);
  const std::string promised = a.state.digest();
  const std::string before = b.state.digest();

  auto flipped = img;
  flipped[img.size() / 2] ^= std::byte{1};
  CHECK_THROWS_AS(b.state.restore_verified(flipped, 0, promised, "flipped"), rf::InvalidInput);
  std::vector<std::byte> cut(img.begin(), img.end() - 8);
  CHECK_THROWS_AS(b.state.restore_verified(cut, 0, promised, "cut"), rf::InvalidInput);
  auto header = img;
  header[9] = std::byte{'#'};
  CHECK_THROWS_WITH_AS(b.state.restore_verified(header, 0, promised, "from rank 4"), doctest::Contains("from rank 4"),
                       rf::InvalidInput);
  CHECK(b.state.digest() == before);
  CHECK(b.state.step() == -1);
}

TEST_CASE("the digest is rf::state_digest: parameters, buffers and counters") {
  Replica a;
  const std::string d0 = a.state.digest();
  CHECK(d0 == state_digest(*a.model, a.sgd));
  a.model->parameters()[0].values()[3] += 1.0f;
  CHECK(a.state.digest() != d0);
}

TEST_CASE("the remembered digest lasts until S may have changed") {
  Replica a, b;
  const std::string d0 = a.state.current_digest();
  CHECK(d0 == a.state.digest());
  a.train_one(0.5f);
  CHECK(a.state.current_digest() == d0);  // not told yet: the memo stands
  a.state.set_step(0);                    // the trainer's call after the update
  const std::string d1 = a.state.current_digest();
  CHECK(d1 != d0);
  CHECK(d1 == a.state.digest());
  a.model->parameters()[0].values()[0] += 1.0f;  // user code writing S ...
  a.state.state_changed();                        // ... is followed by this
  CHECK(a.state.current_digest() == a.state.digest());
  CHECK(a.state.current_digest() != d1);
  // A restore replaces S: b's memo of its old state is dropped.
  const std::string b0 = b.state.current_digest();
  std::vector<std::byte> img;
  a.state.write_image(1, 2, img);
  b.state.restore_verified(img, 0, a.state.digest(), "test");
  CHECK(b.state.current_digest() != b0);
  CHECK(b.state.current_digest() == a.state.digest());
}

// The digest memo across a transfer: write_image reuses current_digest() instead of a pass
// over S, restore_verified leaves current_digest() at the digest restore_state recomputed
// from the image — both must equal a fresh pass, and a stale memo in an image must be
// refused by the receiver (R6), never accepted on the recorded string.
TEST_CASE("after restore_verified, current_digest() is the restored state's digest without a pass") {
  Replica a, b;
  a.train_one(0.5f);
  a.state.set_step(0);
  const std::string da = a.state.current_digest();
  std::vector<std::byte> img;
  a.state.write_image(2, 2, img);
  (void)b.state.current_digest();  // a memo of b's old state, which the restore must replace
  b.state.restore_verified(img, 0, da, "test");
  CHECK(b.state.current_digest() == da);
  CHECK(b.state.current_digest() == state_digest(*b.model, b.sgd));  // a fresh pass agrees
  b.train_one(1.0f);
  b.state.set_step(1);
  CHECK(b.state.current_digest() == state_digest(*b.model, b.sgd));
}

TEST_CASE("an image carrying a stale memo is refused and the receiver keeps its state") {
  Replica a, b;
  a.train_one(0.5f);
  a.state.set_step(0);
  const std::string stale = a.state.current_digest();
  a.train_one(0.25f);  // S written without state_changed(): the memo is now wrong
  std::vector<std::byte> img;
  a.state.write_image(2, 2, img);
  const std::string before = state_digest(*b.model, b.sgd);
  CHECK_THROWS_WITH_AS(b.state.restore_verified(img, 0, stale, "image from rank 0"),
                       doctest::Contains("image from rank 0: the data's state digest is"), rf::InvalidInput);
  CHECK(state_digest(*b.model, b.sgd) == before);
  CHECK(b.state.step() == -1);
}

TEST_CASE("a replica on a device (the simulated cuda:0) and one on the CPU exchange images: same digest, same bits") {
  rf::testing::ScopedSimDevice sim;
  Replica cpu;
  cpu.train_one(0.5f);
  cpu.state.set_step(1);
  rf::testing::DeviceTwin dev_model(*ddp::testing::make_test_mlp(8, 16), Device::CUDA);  // other values
  optim::SGD dev_sgd(dev_model.named_parameters(), sgd_options());
  TrainState dev(dev_model, dev_sgd);
  CHECK(dev.digest() != cpu.state.digest());
  CHECK(dev.image_size() == cpu.state.image_size());

  // CPU -> device: the restore writes the device and reads nothing back from it.
  std::vector<std::byte> img;
  cpu.state.write_image(2, 3, img);
  SyncCounts c0 = sim.rt.sync_counts();
  dev.restore_verified(img, 1, cpu.state.digest(), "cpu replica");
  CHECK(sim.rt.sync_counts().reads == c0.reads);
  CHECK(dev.current_digest() == cpu.state.digest());  // the memo: the recomputed image digest
  CHECK(dev.digest() == cpu.state.digest());          // ...and the device's bytes agree

  // Device -> CPU: one read per tensor for the image, none for the digest (memo), no
  // synchronisation; the very bytes the CPU replica writes.
  const size_t n = dev_model.named_parameters().size() + dev_sgd.named_buffers().size();
  (void)dev.current_digest();
  c0 = sim.rt.sync_counts();
  std::vector<std::byte> from_dev;
  dev.write_image(2, 3, from_dev);
  const SyncCounts c1 = sim.rt.sync_counts();
  CHECK(c1.reads - c0.reads == static_cast<int64_t>(n));
  CHECK(c1.synchronize == c0.synchronize);
  CHECK(from_dev == img);
  Replica other;
  other.state.restore_verified(from_dev, 1, dev.current_digest(), "device replica");
  CHECK(other.state.digest() == cpu.state.digest());
}
