#include "ddp/train_state.h"

#include "ckpt/state.h"
#include "core/state_digest.h"

namespace rf::ddp {

TrainState::TrainState(nn::Module& model, optim::Optimizer& optimizer, std::string model_name)
    : model_(model), optimizer_(optimizer), model_name_(std::move(model_name)) {}

std::string TrainState::digest() const { return state_digest(model_, optimizer_); }

void TrainState::write_image(uint64_t generation, int world, std::vector<std::byte>& out) const {
  ckpt::SnapshotMeta meta;
  meta.model = model_name_;
  meta.step = step_;
  meta.generation = static_cast<int64_t>(generation);
  meta.world_size = world;
  meta.optimizer = "optimizer";
  ckpt::serialize_state(model_, optimizer_, meta, out);
}

void TrainState::restore_verified(std::span<const std::byte> image, int64_t expect_step,
                                  const std::string& expect_digest, const std::string& source) {
  ckpt::RestoreExpect expect;
  expect.model = model_name_;
  expect.step = expect_step;
  expect.digest = expect_digest;
  const ckpt::SnapshotMeta m = ckpt::restore_state(image, model_, optimizer_, expect, source);
  step_ = m.step;
}

}  // namespace rf::ddp
