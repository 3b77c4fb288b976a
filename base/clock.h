#pragma once
// One monotonic clock for deadlines and durations everywhere.
#include <chrono>
#include <cstdint>

namespace rf {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;
using Duration = Clock::duration;

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

inline double seconds_since(TimePoint t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Wall-clock time in microseconds since the Unix epoch, for logs read across processes.
inline int64_t wall_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace rf
