// The double's launches (tests/nccl_double, fake_hooks.h): every collective of a
// non-blocking communicator answers ncclInProgress and launches from a job thread, and
// the first one makes the connections unless NCCL_RUNTIME_CONNECT=0 was set at init.
#include <doctest/doctest.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdlib>
#include <latch>

#include "tests/nccl_double/double_unit.h"
#include "tests/nccl_double/fake_hooks.h"

using namespace rf::nccl_double::unit;

TEST_CASE("double: RF_FAKE_NCCL_INPROGRESS_MS delays the launch; a call before the state settles is misuse") {
  setenv("RF_FAKE_NCCL_INPROGRESS_MS", "100", 1);
  const ncclUniqueId id = new_id();
  // An abort closes the rank's sockets, which its peer's proxy takes for a death (a sticky
  // ncclRemoteError): neither aborts before both settled.
  std::latch settled(2);
  ranks(2, [&](int r) {
    ncclComm_t c = init(2, id, r);
    cudaStream_t s;
    cudaStreamCreate(&s);
    int64_t* v = nullptr;
    cudaMalloc(reinterpret_cast<void**>(&v), sizeof(int64_t));
    *v = r + 1;
    const auto t0 = Clock::now();
    CHECK(ncclAllReduce(v, v, 1, ncclInt64, ncclSum, c, s) == ncclInProgress);
    ncclResult_t st;
    CHECK((ncclCommGetAsyncError(c, &st) == ncclSuccess && st == ncclInProgress));
    CHECK(cudaStreamQuery(s) == cudaSuccess);  // the kernel is not on the stream yet
    CHECK(settle(c) == ncclSuccess);
    CHECK(Clock::now() - t0 >= 90ms);
    CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    CHECK(*v == 3);
    // Calling again before the state reads ncclSuccess breaks NCCL's rule: refused, and
    // the double makes it the async error once the launch job has ended.
    CHECK(ncclAllReduce(v, v, 1, ncclInt64, ncclSum, c, s) == ncclInProgress);
    CHECK(ncclAllReduce(v, v, 1, ncclInt64, ncclSum, c, s) == ncclInvalidArgument);
    CHECK(settle(c) == ncclInvalidArgument);
    CHECK(ncclCommRevoke(c, NCCL_REVOKE_DEFAULT) == ncclInProgress);  // no launch job left: safe
    CHECK(settle(c) == ncclSuccess);
    settled.arrive_and_wait();
    CHECK(ncclCommAbort(c) == ncclSuccess);
    cudaFree(v);
    cudaStreamDestroy(s);
  });
  unsetenv("RF_FAKE_NCCL_INPROGRESS_MS");
}

TEST_CASE("double: the first collective connects inside its launch, unless NCCL_RUNTIME_CONNECT=0 at init") {
  for (const bool at_init : {false, true}) {
    CAPTURE(at_init);
    if (at_init) setenv("NCCL_RUNTIME_CONNECT", "0", 1);
    const ncclUniqueId id = new_id();
    const int before = rf_fake_nccl_runtime_connects();
    ranks(2, [&](int r) {
      ncclComm_t c = init(2, id, r);
      cudaStream_t s;
      cudaStreamCreate(&s);
      int64_t* v = nullptr;
      cudaMalloc(reinterpret_cast<void**>(&v), sizeof(int64_t));
      *v = 1;
      CHECK(launched(ncclAllReduce(v, v, 1, ncclInt64, ncclSum, c, s), c) == ncclSuccess);
      CHECK(launched(ncclAllReduce(v, v, 1, ncclInt64, ncclSum, c, s), c) == ncclSuccess);  // connected by now
      CHECK(cudaStreamSynchronize(s) == cudaSuccess);
      CHECK(*v == 4);
      CHECK(ncclCommAbort(c) == ncclSuccess);
      cudaFree(v);
      cudaStreamDestroy(s);
    });
    // One connect inside a launch per rank (the first collective's), none at init; none at
    // all when connected at init. Counted, not timed: a loaded machine cannot fool it.
    CHECK(rf_fake_nccl_runtime_connects() - before == (at_init ? 0 : 2));
  }
  unsetenv("NCCL_RUNTIME_CONNECT");
}
