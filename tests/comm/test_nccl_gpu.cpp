// The NCCL backend on a GPU (label gpu; tests/gpu_main.cpp skips without one). One rank
// (W = 1) on cuda:0: NCCL refuses two ranks on one GPU, so what needs peers is the
// multi-GPU benchmark's (bench/comm/nccl_regroup_bench.cpp). What W = 1 does check: every
// collective on device and host buffers, the stream contract without a host sync, the
// chunk hook, and the failure paths: an all-reduce held behind a stuck kernel is revoked
// by the stall timeout (D3) near its deadline, with or without a waiting thread, abort()
// from another thread fails a pending operation within its bound, and the next
// generation forms afterwards and works.
#include <doctest/doctest.h>

#include <cuda_runtime.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/device_backends.h"
#include "comm/errors.h"
#include "comm/bootstrap/file_store.h"
#include "comm/nccl/nccl_communicator.h"
#include "tests/comm/nccl_test_kernels.h"

using namespace rf::comm;
using namespace std::chrono_literals;

namespace {

#define CUDA_OK(call) REQUIRE_MESSAGE((call) == cudaSuccess, #call)

std::string temp_dir() {
  std::string t = (std::filesystem::temp_directory_path() / "rf-nccl-gpu-XXXXXX").string();
  REQUIRE(mkdtemp(t.data()) != nullptr);
  return t;
}

// The NCCL half only (this test does not need the UCX staging or registered memory).
void install_nccl() {
  DeviceBackends b = device_backends();
  b.make_nccl = &nccl::make_nccl_communicator;
  b.prepare_nccl = &nccl::prepare_nccl;
  set_device_backends(b);
}

std::shared_ptr<Communicator> make(FileStore& store, uint64_t generation, std::chrono::milliseconds stall,
                                   std::shared_ptr<Communicator> previous = nullptr, ChunkCallback hook = {}) {
  install_nccl();
  CommOptions o;
  o.store = &store;
  o.generation = generation;
  o.stall_timeout = stall;
  o.connect_timeout = 20s;
  o.device = Device::cuda;
  o.device_index = 0;
  o.members = {"w0"};
  o.previous = std::move(previous);
  o.on_chunk = std::move(hook);
  return make_communicator(Backend::Nccl, o);
}

struct DeviceFloats {
  float* p = nullptr;
  size_t n = 0;
  explicit DeviceFloats(size_t count) : n(count) {
    CUDA_OK(cudaMalloc(&p, n * sizeof(float)));
    CUDA_OK(cudaMemset(p, 0, n * sizeof(float)));
  }
  ~DeviceFloats() { cudaFree(p); }
  Buffer buffer() const { return Buffer{p, n, DType::f32, Device::cuda, 0}; }
  std::vector<float> read() const {
    std::vector<float> h(n);
    REQUIRE(cudaMemcpy(h.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
    return h;
  }
};

// A kernel on `stream` stuck until release(): host-mapped flag.
struct StuckKernel {
  int* flag = nullptr;
  int* flag_dev = nullptr;
  explicit StuckKernel(cudaStream_t s) {
    CUDA_OK(cudaHostAlloc(reinterpret_cast<void**>(&flag), sizeof(int), cudaHostAllocMapped));
    *flag = 0;
    CUDA_OK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&flag_dev), flag, 0));
    test::spin_until(flag_dev, s);
  }
  void release() { reinterpret_cast<std::atomic<int>*>(flag)->store(1); }
  ~StuckKernel() {
    release();
    cudaDeviceSynchronize();
    cudaFreeHost(flag);
  }
};

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Several all-reduces and an all-gather on generation `comm`, checked exactly.
void check_works(Communicator& comm, cudaStream_t s, uint64_t step) {
  DeviceFloats x(1000), out(1000);
  for (uint32_t k = 0; k < 5; ++k) {
    test::fill_slow(x.p, x.n, static_cast<float>(k), 0, s);
    comm.allreduce_start(x.buffer(), OpId{step, k}, s)->wait(rf::Clock::now() + 10s);
    CUDA_OK(cudaStreamSynchronize(s));
    const std::vector<float> h = x.read();
    for (size_t i = 0; i < h.size(); ++i) REQUIRE(h[i] == static_cast<float>(k) + static_cast<float>(i));
  }
  comm.allgather_start(x.buffer(), out.buffer(), OpId{step, 9}, s)->wait(rf::Clock::now() + 10s);
  CUDA_OK(cudaStreamSynchronize(s));
  CHECK(out.read() == x.read());
}

}  // namespace

TEST_CASE("nccl: collectives on device and host buffers at W = 1, the chunk hook") {
  FileStore store(temp_dir());
  std::vector<uint64_t> chunks;
  auto comm = make(store, 0, 10s, nullptr, [&](const ChunkEvent& e) { chunks.push_back(e.chunks_done); });
  REQUIRE(comm->world_size() == 1);
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  check_works(*comm, s, 1);
  CHECK(chunks.size() == 10);  // five all-reduces, chunks 1 and 2 each
  for (size_t i = 0; i + 1 < chunks.size(); i += 2) CHECK((chunks[i] == 1 && chunks[i + 1] == 2));

  DeviceFloats b(64);
  test::fill_slow(b.p, b.n, 7, 0, s);
  comm->broadcast_start(b.buffer(), 0, OpId{2, 0}, s)->wait(rf::Clock::now() + 10s);
  CUDA_OK(cudaStreamSynchronize(s));
  CHECK(b.read()[63] == 70.0f);

  // Host buffers go through the pinned staging.
  std::vector<double> h(333);
  std::iota(h.begin(), h.end(), 1.0);
  comm->allreduce(Buffer{h.data(), h.size(), DType::f64}, OpId{3, 0});
  CHECK(h[332] == 333.0);
  std::vector<uint64_t> in{5, 6, 7}, out(3, 0);
  comm->allgather(Buffer{in.data(), 3, DType::u64}, Buffer{out.data(), 3, DType::u64}, OpId{3, 1});
  CHECK(out == in);
  for (uint32_t k = 0; k < 3; ++k) comm->barrier(OpId{4, k});
  CUDA_OK(cudaStreamDestroy(s));
}

TEST_CASE("nccl: stream order without a host sync (slow producer, collective, consumer)") {
  FileStore store(temp_dir());
  auto comm = make(store, 0, 10s);
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const size_t n = 1 << 20;
  DeviceFloats x(n), gathered(n), y(n);
  // The producer spins 50 ms first: an all-gather that did not wait for it copies zeros,
  // and a consumer enqueued after wait() that did not see the all-gather doubles zeros.
  // The host never synchronizes the stream before the consumer.
  test::fill_slow(x.p, n, 1, 50000, s);
  WorkPtr w = comm->allgather_start(x.buffer(), gathered.buffer(), OpId{1, 0}, s);
  w->wait(rf::Clock::now() + 10s);
  test::twice(gathered.p, y.p, n, s);
  CUDA_OK(cudaStreamSynchronize(s));
  const std::vector<float> h = y.read();
  CHECK(h[0] == 2.0f);
  CHECK(h[n - 1] == 2.0f * (1.0f + static_cast<float>(n - 1)));
  CUDA_OK(cudaStreamDestroy(s));
}

TEST_CASE("nccl: an all-reduce behind a stuck kernel fails near its stall deadline naming this GPU; the next generation works") {
  FileStore store(temp_dir());
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  auto gen0 = make(store, 0, 200ms);
  DeviceFloats x(4096);
  {
    StuckKernel stuck(s);
    const auto t0 = std::chrono::steady_clock::now();
    WorkPtr w = gen0->allreduce_start(x.buffer(), OpId{10, 0}, s);
    bool stuck_seen = false;
    try {
      w->wait();
    } catch (const PeerFailed& e) {
      // It never started on this GPU: this rank's own device is stuck (wait_loop.h).
      stuck_seen = e.info().device_stuck;
      const double late = ms_since(t0) - 200.0;
      std::printf("stall timeout: failed %.1f ms after its deadline: %s\n", late, e.what());
      CHECK(late >= -1.0);
      CHECK(late < 100.0);
      CHECK(e.generation() == 0);
      CHECK(e.step() == 10);
    }
    CHECK(stuck_seen);
    // Poisoned: the next operation fails with the same error at once.
    CHECK_THROWS_AS(gen0->allreduce_start(x.buffer(), OpId{10, 1}, s)->wait(rf::Clock::now() + 1s), PeerFailed);
    stuck.release();
    CUDA_OK(cudaStreamSynchronize(s));
  }
  // The same member again: a fresh init from generation 1's own unique id.
  auto gen1 = make(store, 1, 10s, gen0);
  CHECK(gen1->generation() == 1);
  check_works(*gen1, s, 11);
  gen0.reset();
  check_works(*gen1, s, 12);
  CUDA_OK(cudaStreamDestroy(s));
}

TEST_CASE("nccl: the stall timeout holds when nobody waits") {
  FileStore store(temp_dir());
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  auto comm = make(store, 0, 200ms);
  DeviceFloats x(16);
  StuckKernel stuck(s);
  WorkPtr w = comm->allreduce_start(x.buffer(), OpId{1, 0}, s);
  std::this_thread::sleep_for(600ms);  // nobody polls; the watchdog must
  try {
    (void)w->test();
    FAIL("test() did not throw after the stall timeout");
  } catch (const PeerFailed& e) {  // behind a stuck kernel of its own: device_stuck
    CHECK(e.info().device_stuck);
    // The decision's text says how long the operation had stalled when it was made.
    const std::string what = e.what();
    std::printf("stall timeout without a waiter: %s\n", what.c_str());
    const size_t at = what.find("no progress for ");
    REQUIRE(at != std::string::npos);
    const double stalled = std::stod(what.substr(at + 16));
    CHECK(stalled >= 0.2);
    CHECK(stalled < 0.3);
  }
  stuck.release();
  CUDA_OK(cudaStreamSynchronize(s));
  CUDA_OK(cudaStreamDestroy(s));
}

TEST_CASE("nccl: abort() from another thread fails a pending all-reduce within 10 ms") {
  FileStore store(temp_dir());
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  auto comm = make(store, 0, 30s);
  DeviceFloats x(16);
  StuckKernel stuck(s);
  WorkPtr w = comm->allreduce_start(x.buffer(), OpId{1, 0}, s);
  std::atomic<std::chrono::steady_clock::time_point::rep> aborted_at{0};
  std::thread t([&] {
    std::this_thread::sleep_for(100ms);
    aborted_at = std::chrono::steady_clock::now().time_since_epoch().count();
    comm->abort("test: revoked by the coordinator");
  });
  bool aborted = false;
  try {
    w->wait();
  } catch (const Aborted& e) {
    aborted = true;
    const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
    const double late = static_cast<double>(now - aborted_at.load()) / 1e6;
    std::printf("abort: pending all-reduce failed %.2f ms after abort(): %s\n", late, e.what());
    CHECK(late < 10.0);
    CHECK(std::string(e.what()).find("revoked by the coordinator") != std::string::npos);
  }
  t.join();
  CHECK(aborted);
  CHECK(comm->aborted());
  CHECK_THROWS_AS(comm->barrier(OpId{2, 0}), Aborted);
  stuck.release();
  CUDA_OK(cudaStreamSynchronize(s));
  CUDA_OK(cudaStreamDestroy(s));
}
