// The test double alone (tests/nccl_double, fake_hooks.h): one process, a thread per rank,
// each on its own fake device. What the NCCL backend's multi-process tests rely on.
#include <doctest/doctest.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "tests/nccl_double/double_testing.h"
#include "tests/nccl_double/double_unit.h"
#include "tests/nccl_double/fake_hooks.h"

using namespace std::chrono_literals;
using namespace rf::nccl_double::unit;

namespace {

float contribution(int rank, size_t i) { return 0.1f * static_cast<float>(rank + 1) + 1e-3f * static_cast<float>(i); }

bool query_true_within(cudaEvent_t e, std::chrono::milliseconds bound) {
  const auto until = Clock::now() + bound;
  while (Clock::now() < until) {
    if (cudaEventQuery(e) == cudaSuccess) return true;
    std::this_thread::sleep_for(1ms);
  }
  return false;
}

}  // namespace

TEST_CASE("double: init answers ncclInProgress, then the collectives are exact on every rank") {
  const int W = 3;
  const ncclUniqueId id = new_id();
  const size_t n = 1000;
  std::vector<float> want(n);
  for (size_t i = 0; i < n; ++i) {
    float acc = contribution(0, i);
    for (int r = 1; r < W; ++r) acc += contribution(r, i);  // rank order, as the double sums
    want[i] = acc;
  }
  ranks(W, [&](int r) {
    ncclComm_t c = init(W, id, r);
    int count = 0, dev = -1, me = -1;
    CHECK((ncclCommCount(c, &count) == ncclSuccess && count == W));
    CHECK((ncclCommCuDevice(c, &dev) == ncclSuccess && dev == r));
    CHECK((ncclCommUserRank(c, &me) == ncclSuccess && me == r));
    cudaStream_t s;
    REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    float* x = nullptr;
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&x), n * sizeof(float)) == cudaSuccess);
    for (size_t i = 0; i < n; ++i) x[i] = contribution(r, i);
    CHECK(launched(ncclAllReduce(x, x, n, ncclFloat32, ncclSum, c, s), c) == ncclSuccess);
    CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    CHECK(std::memcmp(x, want.data(), n * sizeof(float)) == 0);  // bitwise, on every rank
    CHECK(ncclAllReduce(x, x, 0, ncclFloat32, ncclSum, c, s) == ncclSuccess);  // empty: synchronous

    int64_t* v = nullptr;
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&v), W * sizeof(int64_t)) == cudaSuccess);
    v[0] = r + 1;
    CHECK(launched(ncclAllReduce(v, v, 1, ncclInt64, ncclSum, c, s), c) == ncclSuccess);
    CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    CHECK(v[0] == W * (W + 1) / 2);
    v[r] = 100 + r;  // all-gather in place: sendbuff = recvbuff + rank
    CHECK(launched(ncclAllGather(v + r, v, 1, ncclInt64, c, s), c) == ncclSuccess);
    CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    for (int q = 0; q < W; ++q) CHECK(v[q] == 100 + q);
    double* d = nullptr;  // pinned host memory is allowed too
    REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&d), 4 * sizeof(double)) == cudaSuccess);
    for (int i = 0; i < 4; ++i) d[i] = r == 1 ? 7.5 + i : -1;
    CHECK(launched(ncclBroadcast(d, d, 4, ncclFloat64, 1, c, s), c) == ncclSuccess);
    // send/recv around the ring: grouped, or each recv would wait for a send behind it
    CHECK(ncclGroupStart() == ncclSuccess);
    CHECK(ncclSend(v + r, 1, ncclInt64, (r + 1) % W, c, s) == ncclSuccess);
    CHECK(ncclRecv(v, 1, ncclInt64, (r + W - 1) % W, c, s) == ncclSuccess);
    CHECK(launched(ncclGroupEnd(), c) == ncclSuccess);
    CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    CHECK(d[3] == 10.5);
    CHECK(v[0] == 100 + (r + W - 1) % W);
    // host (pageable) memory is not device memory
    std::vector<float> host(4);
    CHECK(ncclAllReduce(host.data(), host.data(), 4, ncclFloat32, ncclSum, c, s) == ncclInvalidArgument);
    ncclResult_t st;
    CHECK(ncclCommGetAsyncError(c, &st) == ncclSuccess);
    CHECK(st == ncclSuccess);
    CHECK(ncclCommAbort(c) == ncclSuccess);
    cudaFree(x);
    cudaFree(v);
    cudaFreeHost(d);
    cudaStreamDestroy(s);
  });
  CHECK(rf_fake_nccl_live_comms() == 0);
}

TEST_CASE("double: a kernel whose peer never calls waits; ncclCommRevoke ends it, leaving the buffer") {
  const ncclUniqueId id = new_id();
  std::atomic<bool> revoked{false};  // rank 1 keeps its communicator (its sockets) up until then
  ranks(2, [&](int r) {
    ncclComm_t c = init(2, id, r);
    cudaStream_t s;
    cudaStreamCreate(&s);
    cudaEvent_t done;
    cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
    CHECK(cudaEventQuery(done) == cudaSuccess);  // never recorded
    float* x = nullptr;
    cudaMalloc(reinterpret_cast<void**>(&x), 64 * sizeof(float));
    x[0] = 5;
    if (r == 0) {
      CHECK(launched(ncclAllReduce(x, x, 64, ncclFloat32, ncclSum, c, s), c) == ncclSuccess);
      cudaEventRecord(done, s);
      CHECK_FALSE(query_true_within(done, 200ms));
      CHECK(ncclCommRevoke(c, 1) == ncclInvalidArgument);
      CHECK(ncclCommRevoke(c, NCCL_REVOKE_DEFAULT) == ncclInProgress);
      CHECK(settle(c) == ncclSuccess);  // quiescent: the kernel ended
      CHECK(cudaEventQuery(done) == cudaSuccess);
      CHECK(x[0] == 5);
      CHECK(ncclCommRevoke(c, NCCL_REVOKE_DEFAULT) == ncclInvalidArgument);  // twice
      CHECK(ncclAllReduce(x, x, 64, ncclFloat32, ncclSum, c, s) == ncclInvalidUsage);
      revoked = true;
    } else {
      while (!revoked) std::this_thread::sleep_for(1ms);
    }
    CHECK(ncclCommAbort(c) == ncclSuccess);
    cudaEventDestroy(done);
    cudaFree(x);
    cudaStreamDestroy(s);
  });
}

TEST_CASE("double: ranks that disagree on the operation get ncclInternalError") {
  const ncclUniqueId id = new_id();
  ranks(2, [&](int r) {
    ncclComm_t c = init(2, id, r);
    cudaStream_t s;
    cudaStreamCreate(&s);
    float* x = nullptr;
    cudaMalloc(reinterpret_cast<void**>(&x), 64 * sizeof(float));
    CHECK(launched(ncclAllReduce(x, x, r == 0 ? 16 : 32, ncclFloat32, ncclSum, c, s), c) != ncclInProgress);
    CHECK(wait_state(c, ncclInternalError) == ncclInternalError);
    CHECK(std::strstr(ncclGetLastError(c), "mismatch") != nullptr);
    CHECK(ncclCommAbort(c) == ncclSuccess);  // the kernel ends on the abort flag
    cudaFree(x);
    cudaStreamDestroy(s);
  });
}

TEST_CASE("double: ncclGetLastError is one buffer for the process, whatever communicator is named, as NCCL's") {
  // NCCL 2.28.9 (debug.cc): one global ncclLastError, written by every WARN of any thread
  // and communicator, never cleared; the argument is not looked at.
  ncclComm_t bad = nullptr;
  CHECK(ncclCommFinalize(bad) == ncclInvalidArgument);
  const std::string mine = ncclGetLastError(nullptr);
  CHECK_MESSAGE(mine.find("not a live communicator") != std::string::npos, mine);
  std::thread([&] { CHECK(std::string(ncclGetLastError(nullptr)) == mine); }).join();  // another thread sees it
  CHECK(std::string(ncclGetLastError(reinterpret_cast<ncclComm_t>(0x1))) == mine);   // and any handle
}

TEST_CASE("double: a peer that goes away is the proxy's ncclRemoteError naming it; it outlives revoke, so no shrink") {
  const int W = 3;
  const ncclUniqueId id = new_id();
  std::atomic<bool> gone{false};
  std::latch checked(W - 1);  // a survivor's teardown closes its sockets: not before the other checked
  std::latch failed(W - 1);   // ncclGetLastError is one buffer for the process: read it before
  std::latch read(W - 1);     // either survivor's next call can write another warning there
  ranks(W, [&](int r) {
    ncclComm_t c = init(W, id, r);
    cudaStream_t s;
    cudaStreamCreate(&s);
    float* x = nullptr;
    cudaMalloc(reinterpret_cast<void**>(&x), 256 * sizeof(float));
    for (int i = 0; i < 256; ++i) x[i] = static_cast<float>(r + 1);
    if (r == W - 1) {
      CHECK(ncclCommAbort(c) == ncclSuccess);  // closes its sockets: as if it exited
      int excluded[] = {W - 1};
      ncclComm_t child = reinterpret_cast<ncclComm_t>(0x1);
      CHECK(ncclCommShrink(c, excluded, 1, &child, nullptr, NCCL_SHRINK_DEFAULT) == ncclInvalidArgument);
      gone = true;
    } else {
      while (!gone) std::this_thread::sleep_for(1ms);
      CHECK(launched(ncclAllReduce(x, x, 256, ncclFloat32, ncclSum, c, s), c) != ncclInProgress);
      CHECK(wait_state(c, ncclRemoteError) == ncclRemoteError);
      failed.arrive_and_wait();
      const std::string last = ncclGetLastError(c);
      CHECK_MESSAGE(last.find("rank 2") != std::string::npos, last);
      read.arrive_and_wait();
      CHECK(cudaStreamQuery(s) == cudaErrorNotReady);  // the kernel hangs until aborted
      int self[] = {r};
      ncclComm_t child = nullptr;
      CHECK(ncclCommShrink(c, self, 1, &child, nullptr, NCCL_SHRINK_DEFAULT) == ncclInvalidArgument);
      CHECK(ncclCommRevoke(c, NCCL_REVOKE_DEFAULT) == ncclInProgress);
      // Quiescent, the kernel ended without writing: the state is the proxy's error still
      // (NCCL 2.28.9: revoke resets only the communicator's own result).
      CHECK(settle(c) == ncclRemoteError);
      CHECK(cudaStreamSynchronize(s) == cudaSuccess);
      CHECK(x[0] == static_cast<float>(r + 1));
      int excluded[] = {W - 1};
      ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
      cfg.blocking = 0;
      CHECK(ncclCommShrink(c, excluded, 1, &child, &cfg, NCCL_SHRINK_DEFAULT) == ncclRemoteError);
      CHECK(child == nullptr);
      checked.arrive_and_wait();
      CHECK(ncclCommAbort(c) == ncclSuccess);
    }
    cudaFree(x);
    cudaStreamDestroy(s);
  });
  CHECK(rf_fake_nccl_live_comms() == 0);
}

namespace {

// Ranks 0 and 1 shrink rank 2 away; rank 2 keeps its communicator up meanwhile and never
// calls. Each survivor starts an all-reduce (which waits for rank 2), runs `between`, and
// checks the child.
void shrink_case(int flags, const std::function<void(int, ncclComm_t, cudaStream_t)>& prepare,
                 const std::function<void(int, ncclComm_t, ncclComm_t*)>& between) {
  const ncclUniqueId id = new_id();
  std::atomic<int> finished{0};
  ranks(3, [&](int r) {
    ncclComm_t c = init(3, id, r);
    cudaStream_t s;
    cudaStreamCreate(&s);
    if (r == 2) {
      while (finished < 2) std::this_thread::sleep_for(1ms);
    } else {
      float* x = nullptr;
      cudaMalloc(reinterpret_cast<void**>(&x), 8 * sizeof(float));
      x[0] = static_cast<float>(r + 1);
      prepare(r, c, s);
      CHECK(launched(ncclAllReduce(x, x, 8, ncclFloat32, ncclSum, c, s), c) == ncclSuccess);
      between(r, c, nullptr);
      int excluded[] = {2};
      ncclComm_t child = nullptr;
      CHECK(ncclCommShrink(c, excluded, 1, &child, nullptr, flags) == ncclInProgress);
      between(r, c, &child);
      CHECK(settle(c) == ncclSuccess);
      ncclComm_t made = __atomic_load_n(&child, __ATOMIC_ACQUIRE);
      REQUIRE(made != nullptr);
      CHECK(cudaStreamSynchronize(s) == cudaSuccess);
      CHECK(x[0] == static_cast<float>(r + 1));  // the parent's all-reduce never wrote
      CHECK(launched(ncclAllReduce(x, x, 1, ncclFloat32, ncclSum, made, s), made) == ncclSuccess);
      CHECK(cudaStreamSynchronize(s) == cudaSuccess);
      CHECK(x[0] == 3.0f);
      CHECK(ncclCommAbort(made) == ncclSuccess);
      cudaFree(x);
      ++finished;
    }
    CHECK(ncclCommAbort(c) == ncclSuccess);
    cudaStreamDestroy(s);
  });
}

}  // namespace

TEST_CASE("double: a shrink right after a revocation waits until the parent is quiescent") {
  std::latch checked(2);
  shrink_case(
      NCCL_SHRINK_DEFAULT, [](int, ncclComm_t, cudaStream_t s) { CHECK(rf_fake_cuda_spin(s) == cudaSuccess); },
      [&](int r, ncclComm_t c, ncclComm_t* child) {
        if (child == nullptr) {  // before the shrink: revoke, not quiescent (behind the spin)
          CHECK(ncclCommRevoke(c, NCCL_REVOKE_DEFAULT) == ncclInProgress);
          return;
        }
        std::this_thread::sleep_for(200ms);
        ncclResult_t st = ncclSuccess;
        CHECK((ncclCommGetAsyncError(c, &st) == ncclSuccess && st == ncclInProgress));
        CHECK(__atomic_load_n(child, __ATOMIC_ACQUIRE) == nullptr);
        checked.arrive_and_wait();
        if (r == 0) rf_fake_cuda_release_spins();
      });
}

TEST_CASE("double: NCCL_SHRINK_ABORT ends the parent's pending kernels first") {
  shrink_case(NCCL_SHRINK_ABORT, [](int, ncclComm_t, cudaStream_t) {}, [](int, ncclComm_t c, ncclComm_t* child) {
    if (child == nullptr) {
      // A healthy parent still waiting for rank 2: a plain shrink would be misuse only
      // while in progress; here the state is ncclSuccess and the kernel waits.
      ncclResult_t st = ncclInProgress;
      CHECK((ncclCommGetAsyncError(c, &st) == ncclSuccess && st == ncclSuccess));
    }
  });
}

TEST_CASE("double: ncclCommAbort waits for a kernel behind a stuck one, until it is released") {
  cudaSetDevice(0);
  const size_t before = rf_fake_cuda_live_bytes(0);
  ncclComm_t c = init(1, new_id(), 0);
  CHECK(rf_fake_cuda_live_bytes(0) == before + kFakeNcclCommBytes);
  cudaStream_t s;
  cudaStreamCreate(&s);
  {
    rf::nccl_double::DeviceArray<float> x(1);
    REQUIRE(x);
    CHECK(rf_fake_cuda_spin(s) == cudaSuccess);
    CHECK(ncclAllReduce(x.data(), x.data(), 1, ncclFloat32, ncclSum, c, s) == ncclSuccess);
    CHECK(rf::nccl_double::eventually([] { return rf_fake_cuda_spinning() == 1; }, 2s));
    auto aborted = std::async(std::launch::async, [c] { return ncclCommAbort(c); });
    CHECK(aborted.wait_for(300ms) == std::future_status::timeout);
    rf_fake_cuda_release_spins();
    REQUIRE(aborted.wait_for(2s) == std::future_status::ready);
    CHECK(aborted.get() == ncclSuccess);
    CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    CHECK(rf_fake_cuda_live_bytes(0) == before + sizeof(float));
    CHECK(ncclCommAbort(nullptr) == ncclSuccess);
  }
  cudaStreamDestroy(s);
  CHECK(rf_fake_cuda_live_bytes(0) == before);
}

TEST_CASE("double: contexts, memory, streams and events") {
  std::thread([] {
    rf_fake_cuda_reset_contexts();
    int d = -1;
    CHECK((cudaGetDevice(&d) == cudaSuccess && d == 0));
    CHECK(rf_fake_cuda_contexts() == 0u);  // cudaGetDevice makes no context
    CHECK(cudaSetDevice(2) == cudaSuccess);
    CHECK(rf_fake_cuda_contexts() == 4u);
    CHECK(cudaSetDevice(99) == cudaErrorInvalidDevice);
    CHECK(cudaGetLastError() == cudaErrorInvalidDevice);
    CHECK(cudaGetLastError() == cudaSuccess);
    void* p = nullptr;
    size_t free0 = 0, total = 0, free1 = 0;
    CHECK(cudaMemGetInfo(&free0, &total) == cudaSuccess);
    CHECK(cudaMalloc(&p, 1 << 20) == cudaSuccess);
    CHECK(cudaMemGetInfo(&free1, &total) == cudaSuccess);
    CHECK(free0 - free1 == size_t(1) << 20);
    CHECK(cudaFree(p) == cudaSuccess);
    CHECK(cudaFree(p) == cudaErrorInvalidValue);  // twice
    CHECK(rf_fake_cuda_contexts() == 4u);
  }).join();
  std::thread([] {
    rf_fake_cuda_reset_contexts();
    void* p = nullptr;
    CHECK(cudaMalloc(&p, 16) == cudaSuccess);  // a new thread's device 0
    CHECK(rf_fake_cuda_contexts() == 1u);
    cudaEvent_t e0;
    cudaEventCreate(&e0);
    cudaSetDevice(1);
    cudaStream_t s1, s2;
    cudaStreamCreate(&s1);
    cudaStreamCreate(&s2);
    CHECK(cudaEventRecord(e0, s1) == cudaErrorInvalidResourceHandle);  // event of another device
    float host[4] = {1, 2, 3, 4};
    CHECK(cudaMemcpyAsync(host, p, 16, cudaMemcpyHostToDevice, s1) == cudaErrorInvalidValue);
    cudaEvent_t e;
    cudaEventCreate(&e);
    rf_fake_cuda_spin(s1);
    cudaEventRecord(e, s1);
    CHECK(cudaEventQuery(e) == cudaErrorNotReady);
    cudaStreamWaitEvent(s2, e, 0);
    std::atomic<int> ran{0};
    cudaLaunchHostFunc(s2, [](void* a) { static_cast<std::atomic<int>*>(a)->store(1); }, &ran);
    std::this_thread::sleep_for(50ms);
    CHECK(ran == 0);  // s2 waits for e, behind the spin on s1
    cudaStreamDestroy(s1);  // with work pending: it still runs
    rf_fake_cuda_release_spins();
    CHECK(cudaStreamSynchronize(s2) == cudaSuccess);
    CHECK(ran == 1);
    CHECK(cudaEventQuery(e) == cudaSuccess);
    CHECK(cudaStreamQuery(s1) == cudaErrorInvalidResourceHandle);
    cudaEventDestroy(e);
    cudaEventDestroy(e0);
    cudaStreamDestroy(s2);
    cudaFree(p);
    CHECK(rf_fake_cuda_contexts() == 3u);
  }).join();
}

TEST_CASE("double: abort cancels an init whose peers never come; finalize and destroy") {
  cudaSetDevice(0);
  const int comms = rf_fake_nccl_live_comms();
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t c = nullptr;
  CHECK(ncclCommInitRankConfig(&c, 3, new_id(), 1, &cfg) == ncclInProgress);  // ranks 0 and 2 never come
  std::this_thread::sleep_for(50ms);
  ncclResult_t st = ncclSuccess;
  CHECK((ncclCommGetAsyncError(c, &st) == ncclSuccess && st == ncclInProgress));
  float* x = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&x), sizeof(float));
  CHECK(ncclAllReduce(x, x, 1, ncclFloat32, ncclSum, c, nullptr) == ncclInvalidArgument);  // not ready yet
  auto aborted = std::async(std::launch::async, [c] { return ncclCommAbort(c); });
  REQUIRE(aborted.wait_for(2s) == std::future_status::ready);
  CHECK(aborted.get() == ncclSuccess);
  CHECK(ncclCommGetAsyncError(c, &st) == ncclInvalidArgument);  // gone

  c = init(1, new_id(), 0);
  *x = 2;
  CHECK(ncclAllReduce(x, x, 1, ncclFloat32, ncclSum, c, nullptr) == ncclSuccess);
  CHECK(ncclCommFinalize(c) == ncclInProgress);
  CHECK(settle(c) == ncclSuccess);
  CHECK(*x == 2.0f);
  CHECK(ncclCommDestroy(c) == ncclSuccess);
  CHECK(rf_fake_nccl_live_comms() == comms);
  cudaFree(x);
}
