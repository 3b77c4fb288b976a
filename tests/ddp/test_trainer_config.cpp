// Trainer configurations refused before anything starts (no comm), and what one rank
// without fault tolerance may do that several may not: resume from disk.
#include <doctest/doctest.h>

#include <stdlib.h>

#include <string>

#include "../data/temp_dir.h"
#include "base/error.h"
#include "core/optim/sgd.h"
#include "ddp/trainer.h"
#include "test_model.h"

using namespace rf;

namespace {

// comm's local launcher's variables for the test's lifetime: rank 0 of `world`.
struct ScopedRankEnv {
  ScopedRankEnv(int world, const std::string& store) {
    setenv("RF_RANK", "0", 1);
    setenv("RF_WORLD", std::to_string(world).c_str(), 1);
    setenv("RF_STORE", store.c_str(), 1);
  }
  ~ScopedRankEnv() {
    for (const char* name : {"RF_RANK", "RF_WORLD", "RF_STORE"}) unsetenv(name);
  }
};

std::string refusal(ddp::TrainerConfig cfg) {
  auto model = ddp::testing::make_test_mlp(1, 8);
  const data::Dataset ds = ddp::testing::make_test_data(64, 2);
  optim::SGD sgd(model->named_parameters(), {.lr = 0.1f, .momentum = 0.9f});
  cfg.fault_tolerance = false;
  ddp::Trainer t(*model, ddp::testing::sum_loss, ds, sgd, cfg);
  try {
    t.run();
  } catch (const InvalidInput& e) {
    return e.what();
  }
  return "(not refused)";
}

// `steps` steps of the test MLP, one rank without fault tolerance; the final digest.
ddp::TrainerResult train_alone(ddp::TrainerConfig cfg, int64_t steps) {
  auto model = ddp::testing::make_test_mlp(3, 16);
  const data::Dataset ds = ddp::testing::make_test_data(90, 4);
  optim::SGD sgd(model->named_parameters(), {.lr = 0.05f, .momentum = 0.9f});
  cfg.fault_tolerance = false;
  cfg.global_batch = 12;
  cfg.steps = steps;
  ddp::Trainer t(*model, ddp::testing::sum_loss, ds, sgd, cfg);
  return t.run();
}

}  // namespace

TEST_CASE("fault tolerance off with several ranks refuses resume: nothing would agree on the checkpoint") {
  TempDir store;
  ScopedRankEnv env(2, store.path.string());
  ddp::TrainerConfig cfg;
  cfg.ckpt_dir = "/nonexistent/ringfence-test";
  cfg.resume = true;
  CHECK(refusal(cfg).find("resume needs fault tolerance (fault_tolerance = true, under ringfence run) with 2 ranks") == 0);
  cfg.resume = false;
  cfg.resume_from = "/nonexistent/ringfence-test/ckpt-000000003.safetensors";
  CHECK(refusal(cfg).find("resume needs fault tolerance") == 0);
  cfg.resume_from.clear();
  cfg.local_step = [](const Tensor&, std::span<const int32_t>) { return Tensor(); };
  CHECK(refusal(cfg) == "local_step: one rank only, not in exact mode");
}

TEST_CASE("one rank without fault tolerance resumes from disk, bitwise the uninterrupted run") {
  const ddp::TrainerResult whole = train_alone({}, 12);
  TempDir dir;
  ddp::TrainerConfig cfg;
  cfg.ckpt_dir = dir.path.string();
  cfg.ckpt_every = 4;
  const ddp::TrainerResult first = train_alone(cfg, 6);
  CHECK(first.step == 5);
  CHECK(first.checkpoints == 2);  // step 3, then the final one (5)

  SUBCASE("resume: the newest checkpoint, with on_restore told") {
    cfg.resume = true;
    int64_t restored = -1;
    std::string path;
    cfg.on_restore = [&](int64_t step, const std::string& p) { restored = step, path = p; };
    const ddp::TrainerResult resumed = train_alone(cfg, 12);
    CHECK(restored == 5);
    CHECK(path == dir.file("ckpt-000000005.safetensors"));
    CHECK(resumed.resumed_step == 5);
    CHECK(resumed.digest == whole.digest);
  }
  SUBCASE("resume_from: a named file; the directory may hold no newer checkpoint") {
    cfg.resume_from = dir.file("ckpt-000000003.safetensors");
    std::string what;
    try {
      train_alone(cfg, 12);
    } catch (const InvalidInput& e) {
      what = e.what();
    }
    CHECK(what.find("already holds checkpoints (newest " + dir.file("ckpt-000000005.safetensors") +
                    ") newer than the one resumed (step 3)") != std::string::npos);
    TempDir other;
    cfg.ckpt_dir = other.path.string();
    const ddp::TrainerResult resumed = train_alone(cfg, 12);
    CHECK(resumed.resumed_step == 3);
    CHECK(resumed.digest == whole.digest);
    cfg.resume_from = dir.file("nope.safetensors");
    CHECK_THROWS_AS(train_alone(cfg, 12), InvalidInput);
  }
  SUBCASE("resume and resume_from together: refused") {
    cfg.resume = true;
    cfg.resume_from = dir.file("ckpt-000000003.safetensors");
    CHECK_THROWS_WITH(train_alone(cfg, 12), "resume and resume_from: give one of them");
  }
}
