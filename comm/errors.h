#pragma once
// Typed communication errors (recoverable failures are typed exceptions).
//
//   CommError            base; carries where it happened and why
//   ├─ PeerFailed        a peer's endpoint failed (crash, reset, injected drop)   D1
//   │                    (peer() is -1 when the transport cannot say which: NCCL)
//   ├─ TimedOut          no progress for the stall timeout, or a deadline passed  D3
//   └─ Aborted           abort(reason) was called on the communicator, or a peer's step 1
//                        "aborted" farewell relayed its abort ("...; relayed by rank r"):
//                        a revocation, nobody's failure (peer() is -1)
//
// what() reads like "rank 2: all-reduce g=3 s=812 op=1 chunk 5: peer 1 failed (endpoint
// error: Connection reset)" so that one log line says what, where and why.
#include <cstdint>
#include <string>

#include "base/error.h"

namespace rf::comm {

struct CommErrorInfo {
  int rank = -1;            // the rank that raised it
  std::string collective;   // "all-reduce", "broadcast", ... or "bootstrap"
  int64_t generation = -1;
  int64_t step = -1;
  int64_t op = -1;
  int64_t chunk = -1;       // -1: not inside a chunk
  int peer = -1;            // the peer failed / waited on, -1 if none
  std::string cause;
  // This rank's own GPU never reached the operation: a kernel ahead of it on the caller's
  // stream does not end (NCCL backend: the operation's start event never completed). The
  // rank to evict (a failure report of kind gpu_stuck), not a peer. Set on any error of
  // the generation, Aborted included, when it was so at the failure.
  bool device_stuck = false;
};

class CommError : public rf::Error {
 public:
  CommError(const CommErrorInfo& info, const std::string& summary);
  const CommErrorInfo& info() const { return info_; }
  int64_t generation() const { return info_.generation; }
  int64_t step() const { return info_.step; }
  int64_t op() const { return info_.op; }
  int peer() const { return info_.peer; }
  const std::string& cause() const { return info_.cause; }

 private:
  CommErrorInfo info_;
};

class PeerFailed : public CommError {
 public:
  explicit PeerFailed(const CommErrorInfo& info);
};

class TimedOut : public CommError {
 public:
  explicit TimedOut(const CommErrorInfo& info);
};

class Aborted : public CommError {
 public:
  explicit Aborted(const CommErrorInfo& info);
};

}  // namespace rf::comm
