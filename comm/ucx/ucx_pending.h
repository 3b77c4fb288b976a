#pragma once
// What ucx_communicator.cpp and ucx_pump.cpp share: a collective's state as the driver
// sees it (UcxCommunicator::Pending) and its small helpers. Included by those two only.
#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

#include "comm/errors.h"
#include "comm/ucx/ucx_communicator.h"

namespace rf::comm {

namespace ucx_detail {

enum : int { kRunning = 0, kDone = 1, kFailed = 2 };

inline std::exception_ptr make_error(PoisonKind kind, const CommErrorInfo& i) {
  switch (kind) {
    case PoisonKind::abort: return std::make_exception_ptr(Aborted(i));
    case PoisonKind::timeout: return std::make_exception_ptr(TimedOut(i));
    case PoisonKind::peer: break;
  }
  return std::make_exception_ptr(PeerFailed(i));
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace ucx_detail

class UcxCommunicator::Pending : public Work {
 public:
  Pending(UcxCommunicator* owner, std::unique_ptr<Collective> c) : owner_(owner), coll(std::move(c)) {}

  bool test() override {
    int s = state.load(std::memory_order_acquire);
    if (s == ucx_detail::kRunning && owner_->driver_mu_.try_lock()) {
      // Help along, once, without waiting for the driver lock.
      std::lock_guard dl(owner_->driver_mu_, std::adopt_lock);
      owner_->driver_id_.store(std::this_thread::get_id(), std::memory_order_relaxed);
      owner_->pump();
      owner_->driver_id_.store(std::thread::id{}, std::memory_order_relaxed);
      s = state.load(std::memory_order_acquire);
    }
    if (s == ucx_detail::kFailed) std::rethrow_exception(error);
    return s == ucx_detail::kDone;
  }

  void wait(TimePoint deadline) override {
    if (state.load(std::memory_order_acquire) == ucx_detail::kRunning) owner_->wait_for(*this, deadline);
    const int s = state.load(std::memory_order_acquire);
    if (s == ucx_detail::kFailed) std::rethrow_exception(error);
    if (s == ucx_detail::kRunning) {
      CommErrorInfo i;
      i.rank = owner_->rank_;
      i.collective = coll ? coll->name() : "collective";
      i.generation = static_cast<int64_t>(owner_->generation_);
      i.step = static_cast<int64_t>(id.step);
      i.op = id.op;
      i.cause = "wait deadline passed; the collective keeps running";
      throw TimedOut(i);
    }
  }

  UcxCommunicator* owner_;
  std::unique_ptr<Collective> coll;
  OpId id{};
  const char* name = "";
  std::atomic<int> state{ucx_detail::kRunning};
  std::exception_ptr error;
  uint64_t seq = 0;
  bool running = false;   // started running (driver only)
  bool finished = false;  // all rounds done, not yet handed back (driver only)
  bool progress_seen = false;  // a transfer finished since the last stall check (driver only)
  TimePoint last_progress{};
  // Its own stall bound (zero: the communicator's stall_timeout()). The handshake's is the
  // connect deadline: connecting waits on TCP's connection set-up, whose lost SYN is sent
  // again after a second, not on a collective's pace (docs/protocol.md step 5).
  Duration stall_bound{};
};

}  // namespace rf::comm
