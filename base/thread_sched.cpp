#include "base/thread_sched.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <utility>

namespace rf {

const char* to_string(ThreadPriority p) { return name_of(kThreadPriorityNames, p); }

pid_t current_tid() { return static_cast<pid_t>(::syscall(SYS_gettid)); }

ThreadPriority raise_to_control_plane() {
  sched_param sp{};
  sp.sched_priority = 1;  // the lowest real-time priority: above every normal thread
  if (pthread_setschedparam(pthread_self(), SCHED_RR, &sp) == 0) return ThreadPriority::RealTime;
  if (::setpriority(PRIO_PROCESS, static_cast<id_t>(current_tid()), -10) == 0) return ThreadPriority::Raised;
  return ThreadPriority::Unchanged;
}

ThreadCpuClock::ThreadCpuClock(pid_t tid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%d/schedstat", static_cast<int>(tid));
  fd_ = ::open(path, O_RDONLY | O_CLOEXEC);
}

ThreadCpuClock::~ThreadCpuClock() {
  if (fd_ >= 0) ::close(fd_);
}

ThreadCpuClock::ThreadCpuClock(ThreadCpuClock&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}

ThreadCpuClock& ThreadCpuClock::operator=(ThreadCpuClock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

int64_t ThreadCpuClock::runnable_ns() const {
  if (fd_ < 0) return -1;
  char buf[128];
  const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
  if (n <= 0) return -1;
  buf[n] = '\0';
  // "<ns on a CPU> <ns waiting on a runqueue> <timeslices>"
  char* end = nullptr;
  std::strtoull(buf, &end, 10);
  if (end == buf) return -1;
  char* end2 = nullptr;
  const unsigned long long wait = std::strtoull(end, &end2, 10);
  if (end2 == end) return -1;
  return static_cast<int64_t>(wait);
}

}  // namespace rf
