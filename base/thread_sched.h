#pragma once
// How a thread of the control plane gets the CPU when the machine is overloaded, and how
// much of a thread's time went to waiting for a CPU.
//
// The coordinator's loop and each worker's heartbeat thread are what leases (D2, D4) and
// stuck-member judgements (D3) are measured with: if they cannot run for a second, every
// lease expires at once and a healthy job is torn down. They sleep almost all the time, so
// they may run at a real-time priority without taking CPU from anyone:
// raise_to_control_plane() asks for SCHED_RR (root, CAP_SYS_NICE or RLIMIT_RTPRIO), else
// a nice of -10, else leaves the thread as it is, and says which it got.
//
// ThreadCpuClock reads a thread's scheduler statistics (/proc/self/task/TID/schedstat:
// time on a CPU, time runnable but waiting for one). A thread that waited for a CPU was not
// stuck: it was starved (a CPU hog, more ranks than cores), and the stall judgement
// discounts that time (ddp/activity.h).
#include <cstdint>
#include <sys/types.h>

#include "base/enum_names.h"

namespace rf {

enum class ThreadPriority { RealTime, Raised, Unchanged };
inline constexpr EnumName<ThreadPriority> kThreadPriorityNames[] = {
    {ThreadPriority::RealTime, "real-time"}, {ThreadPriority::Raised, "raised"},
    {ThreadPriority::Unchanged, "unchanged"}};
static_assert(lists_each_once(kThreadPriorityNames));
const char* to_string(ThreadPriority p);
ThreadPriority raise_to_control_plane();  // the calling thread

pid_t current_tid();

class ThreadCpuClock {
 public:
  ThreadCpuClock() = default;
  explicit ThreadCpuClock(pid_t tid);  // of this process
  ~ThreadCpuClock();
  ThreadCpuClock(ThreadCpuClock&& o) noexcept;
  ThreadCpuClock& operator=(ThreadCpuClock&& o) noexcept;
  ThreadCpuClock(const ThreadCpuClock&) = delete;
  ThreadCpuClock& operator=(const ThreadCpuClock&) = delete;

  bool available() const { return fd_ >= 0; }
  // Nanoseconds the thread spent runnable, waiting for a CPU, since it started; -1 when the
  // kernel does not say (no schedstat).
  int64_t runnable_ns() const;

 private:
  int fd_ = -1;
};

}  // namespace rf
