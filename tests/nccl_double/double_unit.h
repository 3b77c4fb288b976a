#pragma once
// Helpers of the double's own unit tests (test_nccl_double*.cpp): ranks as threads of one
// process, each on its own fake device, and polling the async state.
#include <doctest/doctest.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <functional>
#include <thread>
#include <vector>

namespace rf::nccl_double::unit {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Runs body(rank) on `world` threads, rank r with device r current.
inline void ranks(int world, const std::function<void(int)>& body) {
  std::vector<std::thread> t;
  for (int r = 0; r < world; ++r)
    t.emplace_back([&, r] {
      cudaSetDevice(r);
      body(r);
    });
  for (auto& x : t) x.join();
}

inline ncclUniqueId new_id() {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  return id;
}

// Polls the async state while it reads ncclInProgress, up to `bound`.
inline ncclResult_t settle(ncclComm_t c, std::chrono::milliseconds bound = 10s) {
  const auto until = Clock::now() + bound;
  ncclResult_t st = ncclInProgress;
  while (Clock::now() < until) {
    if (ncclCommGetAsyncError(c, &st) != ncclSuccess) return ncclInvalidArgument;
    if (st != ncclInProgress) return st;
    std::this_thread::sleep_for(1ms);
  }
  return st;
}

// Polls until the async state reads `want` (a kernel's error comes when the stream
// reaches it), up to `bound`; the last state read.
inline ncclResult_t wait_state(ncclComm_t c, ncclResult_t want, std::chrono::milliseconds bound = 5s) {
  const auto until = Clock::now() + bound;
  ncclResult_t st = ncclSuccess;
  while (Clock::now() < until) {
    if (ncclCommGetAsyncError(c, &st) != ncclSuccess) return ncclInvalidArgument;
    if (st == want) break;
    std::this_thread::sleep_for(1ms);
  }
  return st;
}

// A call on a non-blocking communicator: ncclInProgress, then the state it settles to.
inline ncclResult_t launched(ncclResult_t r, ncclComm_t c) {
  if (r != ncclInProgress) return r == ncclSuccess ? ncclInternalError : r;  // every call answers ncclInProgress
  return settle(c);
}

// A non-blocking communicator, checked: ncclInProgress at once with the handle set, then
// ncclSuccess.
inline ncclComm_t init(int world, const ncclUniqueId& id, int rank) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t c = nullptr;
  CHECK(ncclCommInitRankConfig(&c, world, id, rank, &cfg) == ncclInProgress);
  CHECK(c != nullptr);
  CHECK(settle(c) == ncclSuccess);
  return c;
}

}  // namespace rf::nccl_double::unit
