// Training by hand (one rank of the trainer) with the model on a device, on the simulated
// cuda:0 (tests/core/sim_device.h: host memory behind a device's runtime, the CPU op table),
// so a machine without a GPU runs the device path of train(): the model initialised as on
// the CPU and moved, each batch copied, the reducer's buckets and control tail on the
// device, evaluation and the digest reading back, checkpoints through host staging. Same
// kernels, so the same bits as on the CPU. The UCX communicator's staging of device buffers
// is a CUDA half (comm/cuda/device_staging.h), which a unit test does not link: the
// simulator's memory is host memory, so a stand-in hands its buffers to the host
// communicator as they are (what the staging does after copying them to the host).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <utility>
#include <unistd.h>

#include "comm/device_backends.h"
#include "models/train.h"
#include "models/train_setup.h"
#include "tests/core/sim_device.h"

using namespace rf;
using namespace rf::models;

namespace {
class SimStaging final : public comm::Communicator {
 public:
  explicit SimStaging(std::shared_ptr<comm::Communicator> host) : host_(std::move(host)) {}
  int rank() const override { return host_->rank(); }
  int world_size() const override { return host_->world_size(); }
  uint64_t generation() const override { return host_->generation(); }
  comm::WorkPtr allreduce_start(comm::Buffer b, comm::OpId id, comm::Stream) override {
    return host_->allreduce_start(on_host(b), id);
  }
  comm::WorkPtr broadcast_start(comm::Buffer b, int root, comm::OpId id, comm::Stream) override {
    return host_->broadcast_start(on_host(b), root, id);
  }
  comm::WorkPtr allgather_start(comm::Buffer in, comm::Buffer out, comm::OpId id, comm::Stream) override {
    return host_->allgather_start(on_host(in), on_host(out), id);
  }
  comm::WorkPtr barrier_start(comm::OpId id) override { return host_->barrier_start(id); }
  comm::WorkPtr send_start(int peer, const void* data, size_t bytes, comm::OpId id) override {
    return host_->send_start(peer, data, bytes, id);
  }
  comm::WorkPtr recv_start(int peer, void* data, size_t bytes, comm::OpId id) override {
    return host_->recv_start(peer, data, bytes, id);
  }
  void abort(const std::string& reason) override { host_->abort(reason); }
  void abort_failed(const std::string& reason) override { host_->abort_failed(reason); }
  bool aborted() const override { return host_->aborted(); }
  void inject_drop() override { host_->inject_drop(); }
  void set_stall_timeout(Duration t) override { host_->set_stall_timeout(t); }
  Duration stall_timeout() const override { return host_->stall_timeout(); }

 private:
  static comm::Buffer on_host(comm::Buffer b) {
    b.device = comm::Device::host;
    b.device_index = 0;
    return b;
  }
  std::shared_ptr<comm::Communicator> host_;
};

std::shared_ptr<comm::Communicator> sim_staging(std::shared_ptr<comm::Communicator> host, const comm::CommOptions&) {
  return std::make_shared<SimStaging>(std::move(host));
}

// The simulated device, and the UCX communicator on it for one rank.
struct ScopedSimTraining {
  testing::ScopedSimDevice sim;
  comm::DeviceBackends before = comm::device_backends();
  ScopedSimTraining() {
    comm::DeviceBackends b = before;
    b.stage_device_buffers = &sim_staging;
    comm::set_device_backends(b);
  }
  ~ScopedSimTraining() { comm::set_device_backends(before); }
};

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

TEST_CASE("train on a device: the CPU's bits, one fence wait per step and no blocking read, nothing allocated after step 1") {
  for (ModelKind kind : {ModelKind::MLP, ModelKind::CNN}) {
    CAPTURE(model_name(kind));
    std::ostringstream log;
    const TrainResult cpu = train(tiny(kind, 6), log);

    ScopedSimTraining sim_training;
    testing::SimDevice& rt = sim_training.sim.rt;
    TrainOptions o = tiny(kind, 1);
    o.device = Device::CUDA;
    const SyncCounts before = rt.sync_counts();
    (void)train(o, log);  // one step: warms the device's caching allocator
    const SyncCounts one_step = rt.sync_counts();
    const size_t fresh = rt.allocator().stats().fresh_blocks;
    o.max_steps = 6;
    const TrainResult dev = train(o, log);
    const SyncCounts six_steps = rt.sync_counts();
    CHECK(dev.state_digest == cpu.state_digest);
    CHECK(dev.losses == cpu.losses);
    CHECK(dev.test_accuracy == cpu.test_accuracy);
    CHECK(dev.test_loss == cpu.test_loss);
    // Steps 2-6 have step 1's shapes: the cache holds every block they need.
    CHECK(rt.allocator().stats().fresh_blocks == fresh);
    // The same evaluation and digest as the one-step run: the five more steps cost one
    // fence wait each (the reducer's control tail, which brings the loss too) and no
    // blocking read.
    CHECK(six_steps.reads - one_step.reads == one_step.reads - before.reads);
    CHECK(six_steps.fence_waits - one_step.fence_waits == one_step.fence_waits - before.fence_waits + 5);
    CHECK(six_steps.synchronize == 0);
  }
}

TEST_CASE("checkpoints of a model on a device: resumed, the uninterrupted run's bits") {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("rf_models_device_ckpt_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  std::ostringstream log;
  const TrainResult whole = train(tiny(ModelKind::MLP, 7), log);
  ScopedSimTraining sim;
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
