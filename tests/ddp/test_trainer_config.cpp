// Trainer configurations refused before anything starts (no rank environment, no comm).
#include <doctest/doctest.h>

#include <string>

#include "base/error.h"
#include "core/optim/sgd.h"
#include "ddp/trainer.h"
#include "test_model.h"

using namespace rf;

TEST_CASE("fault tolerance off refuses resume: nothing would agree on the checkpoint") {
  auto model = ddp::testing::make_test_mlp(1, 8);
  const data::Dataset ds = ddp::testing::make_test_data(64, 2);
  optim::SGD sgd(model->named_parameters(), {.lr = 0.1f, .momentum = 0.9f});
  ddp::TrainerConfig cfg;
  cfg.fault_tolerance = false;
  cfg.ckpt_dir = "/nonexistent/ringfence-test";
  cfg.resume = true;
  ddp::Trainer t(*model, ddp::testing::sum_loss, ds, sgd, cfg);
  std::string what;
  try {
    t.run();
  } catch (const InvalidInput& e) {
    what = e.what();
  }
  CHECK(what.find("resume needs fault tolerance") != std::string::npos);
}
