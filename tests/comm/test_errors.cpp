#include <doctest/doctest.h>

#include "comm/errors.h"
#include "comm/types.h"

using namespace rf::comm;

TEST_CASE("errors read as one line: who, which collective and tag, what happened") {
  CommErrorInfo i;
  i.rank = 2;
  i.collective = "all-reduce";
  i.generation = 3;
  i.step = 812;
  i.op = 1;
  i.chunk = 5;
  i.peer = 1;
  i.cause = "endpoint error: Connection reset";
  const PeerFailed e(i);
  CHECK(std::string(e.what()) == "rank 2: all-reduce g=3 s=812 op=1 chunk 5: peer 1 failed (endpoint error: Connection reset)");
  CHECK(e.peer() == 1);
  CHECK(e.generation() == 3);
  const rf::Error& base = e;  // every comm error is an rf::Error
  CHECK(std::string(base.what()).find("peer 1") != std::string::npos);
  i.chunk = -1;
  i.peer = -1;
  i.cause = "coordinator revoked g=3";
  CHECK(std::string(Aborted(i).what()) == "rank 2: all-reduce g=3 s=812 op=1: aborted (coordinator revoked g=3)");
  i.cause = "NCCL async error 6: remote process exited";
  CHECK(std::string(PeerFailed(i).what()) ==
        "rank 2: all-reduce g=3 s=812 op=1: a peer failed (NCCL async error 6: remote process exited)");
}

TEST_CASE("reduce_sum adds in the given operand order, integers wrap") {
  float a[3] = {1, 2, 3}, b[3] = {10, 20, 30};
  reduce_sum(DType::f32, a, a, b, 3);
  CHECK(a[2] == 33);
  int64_t x[1] = {INT64_MAX}, y[1] = {1};
  reduce_sum(DType::i64, x, x, y, 1);
  CHECK(x[0] == INT64_MIN);
  CHECK(dtype_size(DType::f64) == 8);
  CHECK(std::string(dtype_name(DType::f32)) == "float");
}
