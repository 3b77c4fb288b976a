// Training goes on after an NCCL generation failed (label gpu, W = 1 on cuda:0): an
// all-reduce behind a stuck kernel is revoked by the stall timeout, the kernel is
// released, the next generation forms, and ddp::Reducer + the test MLP train three steps
// on the GPU with it: the same bits (state digest, losses) as three steps on a
// communicator that never failed.
#include <doctest/doctest.h>

#include <cuda_runtime.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/device_backends.h"
#include "comm/errors.h"
#include "comm/bootstrap/file_store.h"
#include "comm/nccl/nccl_communicator.h"
#include "core/autograd.h"
#include "core/optim/sgd.h"
#include "core/state_digest.h"
#include "ddp/reducer.h"
#include "tests/ckpt/device_twin.h"
#include "tests/comm/nccl_test_kernels.h"
#include "tests/ddp/test_model.h"

using namespace rf;
using namespace std::chrono_literals;

namespace {

std::shared_ptr<comm::Communicator> make(comm::FileStore& store, uint64_t generation,
                                         std::chrono::milliseconds stall,
                                         std::shared_ptr<comm::Communicator> previous = nullptr) {
  comm::DeviceBackends b = comm::device_backends();
  b.make_nccl = &comm::nccl::make_nccl_communicator;
  b.prepare_nccl = &comm::nccl::prepare_nccl;
  comm::set_device_backends(b);
  comm::CommOptions o;
  o.store = &store;
  o.generation = generation;
  o.stall_timeout = stall;
  o.device = comm::Device::cuda;
  o.members = {"w0"};
  o.previous = std::move(previous);
  return comm::make_communicator(comm::Backend::Nccl, o);
}

struct Run {
  std::string digest;
  std::vector<double> losses;
};

// Three steps of the test MLP on cuda:0 through ddp::Reducer and `comm`.
Run train(comm::Communicator& comm) {
  auto cpu = ddp::testing::make_test_mlp(3, 32);
  testing::DeviceTwin dev(*cpu, Device::CUDA);
  ddp::Reducer red(dev.named_parameters(), {.bucket_cap_bytes = 4096, .overlap = true});
  optim::SGD sgd(dev.named_parameters(), {.lr = 0.05f, .momentum = 0.9f});
  const data::Dataset ds = ddp::testing::make_test_data(16, 11);
  const Tensor x = Tensor::from({16, 1, 8, 8}, ds.images).to(Device::CUDA);
  Run r;
  for (uint64_t s = 0; s < 3; ++s) {
    red.begin_step(comm, s, {.samples = 16});
    Tensor loss = ddp::testing::sum_loss(dev(x), ds.labels);
    red.set_local_loss(loss);
    loss.backward();
    red.finish();
    {
      NoGradGuard ng;
      sgd.step();
    }
    r.losses.push_back(red.global_loss());
  }
  r.digest = state_digest(dev, sgd);
  return r;
}

}  // namespace

TEST_CASE("nccl training: after a stall revoked generation 0, generation 1 trains with the bits of a clean run") {
  std::string dir = (std::filesystem::temp_directory_path() / "rf-nccl-train-XXXXXX").string();
  REQUIRE(mkdtemp(dir.data()) != nullptr);
  comm::FileStore store(dir);
  cudaStream_t s;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  int* flag = nullptr;
  int* flag_dev = nullptr;
  REQUIRE(cudaHostAlloc(reinterpret_cast<void**>(&flag), sizeof(int), cudaHostAllocMapped) == cudaSuccess);
  *flag = 0;
  REQUIRE(cudaHostGetDevicePointer(reinterpret_cast<void**>(&flag_dev), flag, 0) == cudaSuccess);
  float* x = nullptr;
  REQUIRE(cudaMalloc(&x, 256 * sizeof(float)) == cudaSuccess);

  auto gen0 = make(store, 0, 200ms);
  comm::test::spin_until(flag_dev, s);
  comm::WorkPtr w = gen0->allreduce_start(comm::Buffer{x, 256, comm::DType::f32, comm::Device::cuda, 0}, {5, 0}, s);
  CHECK_THROWS_AS(w->wait(), comm::PeerFailed);  // behind its own stuck kernel: device_stuck
  reinterpret_cast<std::atomic<int>*>(flag)->store(1);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);

  auto gen1 = make(store, 1, 10s, gen0);
  const Run after = train(*gen1);
  auto clean = make(store, 2, 10s);
  const Run reference = train(*clean);
  CHECK(after.digest == reference.digest);
  CHECK(after.losses == reference.losses);
  CHECK(std::isfinite(after.losses.back()));
  CHECK(after.losses.back() < after.losses.front());

  cudaFree(x);
  cudaFreeHost(flag);
  cudaStreamDestroy(s);
}
