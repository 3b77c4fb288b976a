// The single-process loop with the model on a device, on the simulated cuda:0
// (tests/core/sim_device.h: host memory behind a device's runtime, the CPU op table), so a
// machine without a GPU runs the device path of train(): the model initialised as on the
// CPU and moved, each batch copied, evaluation and the digest reading back, checkpoints
// through host staging. Same kernels, so the same bits as on the CPU.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <unistd.h>

#include "models/train_loop.h"
#include "models/train_setup.h"
#include "tests/core/sim_device.h"

using namespace rf;
using namespace rf::models;

namespace {
TrainOptions tiny(ModelKind kind, int64_t steps) {
  TrainOptions o;
  o.model = kind;
  o.synthetic = 256;
  o.batch = 32;
  o.max_steps = steps;
  o.log_interval = 0;
  o.lr = 0.02f;
  return o;
}
}  // namespace

TEST_CASE("build_model on a device: the CPU's initial values, parameters and gradients there") {
  testing::ScopedSimDevice sim;
  TrainOptions o = tiny(ModelKind::CNN, 1);
  const auto cpu = build_model(o);
  o.device = Device::CUDA;
  const auto dev = build_model(o);
  CHECK(model_device(*dev) == Device::CUDA);
  CHECK(model_device(*cpu) == Device::CPU);
  const auto cp = cpu->named_parameters(), dp = dev->named_parameters();
  REQUIRE(cp.size() == dp.size());
  for (size_t i = 0; i < cp.size(); ++i) {
    const Tensor& d = dp[i].second;
    CHECK(d.device() == Device::CUDA);
    CHECK(d.grad().device() == Device::CUDA);
    CHECK(d.requires_grad());
    const Tensor back = d.to(Device::CPU);
    CHECK(std::equal(back.values().begin(), back.values().end(), cp[i].second.values().begin()));
  }
}

TEST_CASE("train on a device: the CPU's bits, the loss read once per step, nothing allocated after step 1") {
  for (ModelKind kind : {ModelKind::MLP, ModelKind::CNN}) {
    CAPTURE(model_name(kind));
    std::ostringstream log;
    const TrainResult cpu = train(tiny(kind, 6), log);

    testing::ScopedSimDevice sim;
    TrainOptions o = tiny(kind, 1);
    o.device = Device::CUDA;
    const int64_t reads0 = sim.rt.sync_counts().reads;
    (void)train(o, log);  // one step: warms the device's caching allocator
    const int64_t one_step_reads = sim.rt.sync_counts().reads - reads0;
    const size_t fresh = sim.rt.allocator().stats().fresh_blocks;
    const int64_t reads1 = sim.rt.sync_counts().reads;
    o.max_steps = 6;
    const TrainResult dev = train(o, log);
    CHECK(dev.state_digest == cpu.state_digest);
    CHECK(dev.losses == cpu.losses);
    CHECK(dev.test_accuracy == cpu.test_accuracy);
    CHECK(dev.test_loss == cpu.test_loss);
    // Steps 2-6 have step 1's shapes: the cache holds every block they need.
    CHECK(sim.rt.allocator().stats().fresh_blocks == fresh);
    // The same evaluation and digest as the one-step run: the five more steps cost one
    // blocking read each (the loss), nothing else.
    CHECK(sim.rt.sync_counts().reads - reads1 == one_step_reads + 5);
    CHECK(sim.rt.sync_counts().synchronize == 0);
  }
}

TEST_CASE("checkpoints of a model on a device: resumed, the uninterrupted run's bits") {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("rf_models_device_ckpt_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  std::ostringstream log;
  const TrainResult whole = train(tiny(ModelKind::MLP, 7), log);
  testing::ScopedSimDevice sim;
  TrainOptions o = tiny(ModelKind::MLP, 4);
  o.device = Device::CUDA;
  o.ckpt_dir = dir;
  (void)train(o, log);
  o.max_steps = 7;
  o.resume = true;
  const TrainResult resumed = train(o, log);
  CHECK(resumed.resumed_step == 3);
  CHECK(resumed.state_digest == whole.state_digest);
  std::filesystem::remove_all(dir);
}

TEST_CASE("--metrics names the device and the backend") {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("rf_models_device_metrics_" + std::to_string(::getpid()) + ".json")).string();
  TrainOptions o = tiny(ModelKind::MLP, 0);
  o.backend = comm::Backend::Nccl;
  o.device = Device::cuda(0);
  TrainResult r;
  write_metrics(path, o, r);
  std::ifstream f(path);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  CHECK(text.find("\"device\": \"cuda:0\"") != std::string::npos);
  CHECK(text.find("\"backend\": \"nccl\"") != std::string::npos);
  std::filesystem::remove(path);
}
