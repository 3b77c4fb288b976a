// TrainState's digest memo across a transfer: write_image reuses current_digest() instead
// of a pass over S, restore_verified leaves current_digest() at the digest restore_state
// recomputed from the image — both must equal a fresh pass, and a stale memo in an image
// must be refused by the receiver (R6), never accepted on the recorded string.
#include <doctest/doctest.h>

#include <vector>

#include "base/error.h"
#include "core/optim/sgd.h"
#include "core/state_digest.h"
#include "ddp/train_state.h"
#include "test_model.h"

using namespace rf;
using rf::ddp::TrainState;

namespace {
struct Replica {
  std::shared_ptr<nn::Sequential> model;
  optim::SGD sgd;
  TrainState state;
  Replica()
      : model(ddp::testing::make_test_mlp(7, 16)), sgd(model->named_parameters(), {.lr = 0.1f, .momentum = 0.9f}),
        state(*model, sgd) {}
  void train_one(float scale) {
    for (auto& p : model->parameters()) {
      p.zero_grad();
      for (float& g : p.grad().values()) g = scale;
    }
    sgd.step();
  }
};
}  // namespace

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
