#pragma once
// A communicator that does nothing: rank 0 of one, generation 1, every collective a null
// Work, every seam a no-op. Unit tests derive from it and override only what they exercise
// (an all-reduce that multiplies, ranks as threads, a regroup flag).
#include <string>

#include "comm/communicator.h"

namespace rf::comm::testing {

class NullCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  uint64_t generation() const override { return 1; }
  WorkPtr allreduce_start(Buffer, OpId, Stream) override { return nullptr; }
  WorkPtr broadcast_start(Buffer, int, OpId, Stream) override { return nullptr; }
  WorkPtr allgather_start(Buffer, Buffer, OpId, Stream) override { return nullptr; }
  WorkPtr barrier_start(OpId) override { return nullptr; }
  WorkPtr send_start(int, const void*, size_t, OpId) override { return nullptr; }
  WorkPtr recv_start(int, void*, size_t, OpId) override { return nullptr; }
  void abort(const std::string&) override {}
  void abort_failed(const std::string&) override {}
  bool aborted() const override { return false; }
  void inject_drop() override {}
  void set_stall_timeout(Duration t) override { stall_ = t; }
  Duration stall_timeout() const override { return stall_; }

 private:
  Duration stall_{};
};

}  // namespace rf::comm::testing
