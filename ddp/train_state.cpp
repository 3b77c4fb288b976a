#include "ddp/train_state.h"

#include "base/populate.h"
#include "ckpt/state.h"

namespace rf::ddp {

TrainState::TrainState(nn::Module& model, optim::Optimizer& optimizer, std::string model_name)
    : model_(model), optimizer_(optimizer), model_name_(std::move(model_name)) {}

std::string TrainState::digest() const { return ckpt::state_digest_of(model_, optimizer_, &staging_); }

const std::string& TrainState::current_digest() const {
  if (!memo_valid_) {
    memo_ = digest();
    memo_valid_ = true;
  }
  return memo_;
}

ckpt::SnapshotMeta TrainState::meta(uint64_t generation, int world) const {
  ckpt::SnapshotMeta m;
  m.model = model_name_;
  m.step = step_;
  m.generation = static_cast<int64_t>(generation);
  m.world_size = world;
  m.optimizer = optimizer_.kind();
  return m;
}

size_t TrainState::image_size() const { return ckpt::snapshot_size(model_, optimizer_, meta(0, 1)); }

void TrainState::prepare_staging(std::vector<std::byte>& buf) const {
  const size_t bytes = image_size() + 4096;
  if (buf.size() >= bytes) return;
  buf.reserve(bytes);  // a fresh allocation of this size is mapped, not touched
  populate_pages(buf.data(), bytes);  // bounded calls: the heartbeat thread never waits long (base/populate.h)
  buf.resize(bytes);
}

void TrainState::write_image(uint64_t generation, int world, std::vector<std::byte>& out) const {
  // The memo is this state's digest (current_digest), so serialize_state skips its own
  // pass over S; the receiver recomputes it from the image's data anyway (restore_state).
  ckpt::serialize_state(model_, optimizer_, meta(generation, world), out, current_digest(), &staging_);
}

void TrainState::restore_verified(std::span<const std::byte> image, int64_t expect_step,
                                  const std::string& expect_digest, const std::string& source) {
  ckpt::RestoreExpect expect;
  expect.model = model_name_;
  expect.optimizer = optimizer_.kind();
  expect.step = expect_step;
  expect.digest = expect_digest;
  // A refused image changed nothing (R6), but forget the memo either way: cheap and sure.
  state_changed();
  std::string swapped_in;
  const ckpt::SnapshotMeta m = ckpt::restore_state(image, model_, optimizer_, expect, source, &swapped_in);
  step_ = m.step;
  // restore_state recomputed the digest from the image's data before the swap and proved
  // it is the digest of the state after it (ckpt/state.cpp): no second pass over S.
  memo_ = std::move(swapped_in);
  memo_valid_ = true;
}

}  // namespace rf::ddp
