#pragma once
// What loopback_communicator.cpp and loopback_pump.cpp share: one started operation as the
// driver sees it, and its Work handle. Included by those two only.
#include <atomic>
#include <exception>
#include <memory>

#include "base/clock.h"
#include "comm/errors.h"
#include "tests/comm/inproc/loopback_communicator.h"

namespace rf::comm::inproc {

class LoopbackCommunicator::Pending final : public Work {
 public:
  enum : int { kRunning = 0, kDone = 1, kFailed = 2 };  // state
  Pending(LoopbackCommunicator* owner, std::unique_ptr<Collective> c) : owner_(owner), coll(std::move(c)) {}

  bool test() override {
    if (state.load(std::memory_order_acquire) == kRunning) owner_->try_drive();
    const int s = state.load(std::memory_order_acquire);
    if (s == kFailed) std::rethrow_exception(error);
    return s == kDone;
  }

  void wait(TimePoint deadline) override {
    if (state.load(std::memory_order_acquire) == kRunning) owner_->wait_for(*this, deadline);
    const int s = state.load(std::memory_order_acquire);
    if (s == kFailed) std::rethrow_exception(error);
    if (s == kRunning) {
      CommErrorInfo i;
      i.rank = owner_->rank_;
      i.collective = coll->name();
      i.generation = static_cast<int64_t>(owner_->generation());
      i.step = static_cast<int64_t>(coll->id().step);
      i.op = coll->id().op;
      i.cause = "wait deadline passed; the collective keeps running";
      throw TimedOut(i);
    }
  }

  LoopbackCommunicator* owner_;
  std::unique_ptr<Collective> coll;
  std::atomic<int> state{kRunning};
  std::exception_ptr error;  // written before state becomes kFailed
  bool running = false;      // driver only, as the two below
  bool finished = false;
  TimePoint last_progress{};
};

}  // namespace rf::comm::inproc
