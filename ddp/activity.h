#pragma once
// ActivityBoard — what the training thread is doing, as the heartbeat thread reads it for
// the coordinator's judgement of stuck members (elastic/liveness.h, docs/protocol.md D3).
//
// The training thread marks each change with a few relaxed atomic stores (no lock, no
// allocation: it happens several times a step): computing in a step or a recovery phase,
// waiting inside a collective (WaitScope), or idle (waiting on the coordinator, or
// connecting, whose waits have their own deadlines). The heartbeat thread reads a
// snapshot. Fields are written before the kind that publishes them, so a torn read can only
// show a change as more recent than it was (a shorter elapsed time): it may delay a verdict
// by one heartbeat, never make a healthy worker look stuck.
//
// Starved is not stuck: with attach_thread(), each read also says how long the training
// thread has been runnable but waiting for a CPU since the activity began (its schedstat,
// base/thread_sched.h), and the coordinator does not count that time. Frozen is not stuck
// either: the reader is given how long in all the process did not run when its heartbeat
// thread was due to (a SIGSTOP, a VM its host paused: every thread stops at once, and
// schedstat sees no wait), and says how much of that fell in the activity. The reader
// samples both counters at every heartbeat and takes an activity's start values from the
// samples before it began, so it can only count a little more than there was (at most one
// heartbeat's worth from before the activity), never less: a verdict may come a heartbeat
// late, never early.
#include <atomic>
#include <cstdint>

#include "base/clock.h"
#include "base/thread_sched.h"
#include "elastic/membership_types.h"

namespace rf::ddp {

class ActivityBoard {
 public:
  enum class Region : int { Step, Recovery };
  // Computing from now on, in step `index` or in the recovery to generation `index`,
  // judged against `bound`.
  void compute(Region region, int64_t index, Duration bound);
  void idle();
  // The training thread, once, before the heartbeats start reading.
  void attach_thread(pid_t tid) { cpu_ = ThreadCpuClock(tid); }
  // Inside a collective: its own D3 applies; the coordinator only calls it wedged past
  // wedge_factor bounds. Back to computing (a new start) when the scope ends.
  class WaitScope {
   public:
    explicit WaitScope(ActivityBoard& b) : b_(b) { b_.set_kind(elastic::Activity::Wait); }
    ~WaitScope() { b_.set_kind(elastic::Activity::Compute); }
    WaitScope(const WaitScope&) = delete;
    WaitScope& operator=(const WaitScope&) = delete;

   private:
    ActivityBoard& b_;
  };
  // Waiting on the coordinator (a call on the caller connection, with its own timeout):
  // idle, never judged. On a lossy link one call waits for TCP's retransmission timer, a
  // second and more, which is no hang of this worker. Back to what it was doing (a new
  // start) when the scope ends.
  class IdleScope {
   public:
    explicit IdleScope(ActivityBoard& b)
        : b_(b), was_(static_cast<elastic::Activity::Kind>(b.kind_.load(std::memory_order_relaxed))) {
      b_.set_kind(elastic::Activity::Idle);
    }
    ~IdleScope() { b_.set_kind(was_); }
    IdleScope(const IdleScope&) = delete;
    IdleScope& operator=(const IdleScope&) = delete;

   private:
    ActivityBoard& b_;
    elastic::Activity::Kind was_;
  };
  // The heartbeat thread only: it keeps the samples of the CPU-wait and frozen counters.
  // frozen_total: how long the process did not run, in all (ControlPlane::frozen_total).
  elastic::Activity read(TimePoint now, Duration frozen_total = Duration::zero());

 private:
  static int64_t ns(Duration d) { return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(); }
  void set_kind(elastic::Activity::Kind k);
  std::atomic<int> kind_{elastic::Activity::Idle};
  std::atomic<int> region_{0};
  std::atomic<int64_t> index_{-1};
  std::atomic<int64_t> since_ns_{0};  // steady clock
  std::atomic<int64_t> bound_ns_{0};
  // The reader's: the CPU-wait counter of the training thread and the frozen counter, their
  // last samples, and their start values for the activity that began at region_since_.
  ThreadCpuClock cpu_;
  int64_t prev_runnable_ = -1;
  int64_t prev_frozen_ = -1;
  int64_t region_since_ = -1;
  int64_t region_base_ = 0;
  int64_t frozen_base_ = 0;
};

}  // namespace rf::ddp
