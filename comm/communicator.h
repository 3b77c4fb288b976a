#pragma once
// Communicator — what the rest of ringfence sees of the data plane: collectives on typed
// buffers of one generation, asynchronous, abortable from any thread. UcxCommunicator
// (comm/ucx/) is the only implementation so far; a GPU backend (NCCL) is to implement the
// same class.
//
// Contract
// * Every collective is named by an OpId (step, op) which becomes its tag with the
//   communicator's generation (comm/tag.h). All ranks must start the same collectives in
//   the same order; a communicator runs them one after the other, so several outstanding
//   collectives (gradient buckets) complete in the order they were started.
// * Buffers stay valid and untouched until the collective's Work finished (done or failed).
// * Failures are typed (comm/errors.h). After one failure the communicator is poisoned:
//   every pending and future operation fails with that error (or Aborted after abort()).
// * all-reduce delivers bitwise identical results on every rank (PROTOCOL.md R4).
#include <memory>
#include <string>

#include "base/clock.h"
#include "comm/types.h"

namespace rf::comm {

class Work {
 public:
  virtual ~Work() = default;
  // true once finished successfully; rethrows the collective's error if it failed.
  virtual bool test() = 0;
  // Blocks until finished or `deadline`. Throws the collective's error, or TimedOut if the
  // deadline passed first (the collective keeps running; the stall timeout still applies).
  virtual void wait(TimePoint deadline) = 0;
  void wait() { wait(TimePoint::max()); }
};
using WorkPtr = std::shared_ptr<Work>;

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual uint64_t generation() const = 0;

  // Sum in place over all ranks.
  virtual WorkPtr allreduce_start(Buffer buf, OpId id, Stream stream = nullptr) = 0;
  // root's buffer to everyone's.
  virtual WorkPtr broadcast_start(Buffer buf, int root, OpId id, Stream stream = nullptr) = 0;
  // out (W x in.count elements) receives every rank's `in`, in rank order.
  virtual WorkPtr allgather_start(Buffer in, Buffer out, OpId id, Stream stream = nullptr) = 0;
  virtual WorkPtr barrier_start(OpId id) = 0;
  // Point-to-point byte blobs (state transfer). The receiver must name the exact size.
  virtual WorkPtr send_start(int peer, const void* data, size_t bytes, OpId id) = 0;
  virtual WorkPtr recv_start(int peer, void* data, size_t bytes, OpId id) = 0;

  // Blocking forms. A backend may override them with a faster path than start + wait.
  virtual void allreduce(Buffer buf, OpId id) { allreduce_start(buf, id)->wait(); }
  virtual void broadcast(Buffer buf, int root, OpId id) { broadcast_start(buf, root, id)->wait(); }
  virtual void allgather(Buffer in, Buffer out, OpId id) { allgather_start(in, out, id)->wait(); }
  virtual void barrier(OpId id) { barrier_start(id)->wait(); }
  virtual void send(int peer, const void* data, size_t bytes, OpId id) { send_start(peer, data, bytes, id)->wait(); }
  virtual void recv(int peer, void* data, size_t bytes, OpId id) { recv_start(peer, data, bytes, id)->wait(); }

  // Callable from any thread (e.g. the elastic client's heartbeat thread). Only sets a
  // flag: every pending and future operation then fails within 10 ms with Aborted naming
  // the generation and `reason`.
  virtual void abort(const std::string& reason) = 0;
  virtual bool aborted() const = 0;
  // D3: a collective that makes no progress this long fails with TimedOut. Callable from
  // any thread at any time (the trainer sets the bound it learned from its step times,
  // ddp/stall_bound.h); it applies to the next check of every pending collective.
  virtual void set_stall_timeout(Duration timeout) = 0;
  virtual Duration stall_timeout() const = 0;
};

}  // namespace rf::comm
