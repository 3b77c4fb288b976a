#include "elastic/liveness.h"

#include <algorithm>

#include "base/str.h"

namespace rf::elastic {
namespace {
double seconds(Duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

const char* to_string(LivenessVerdict::Kind k) { return name_of(kLivenessKindNames, k); }

LivenessVerdict judge_activity(TimePoint now, const Activity& a, TimePoint received, double wedge_factor,
                               Duration fresh_for) {
  LivenessVerdict v;
  if (a.kind == Activity::Idle || a.bound <= Duration::zero()) return v;
  if (now - received > fresh_for) {
    v.kind = LivenessVerdict::Stale;
    return v;
  }
  // The heartbeat left `elapsed` into the activity; it has gone on since it arrived (a
  // newer heartbeat would have replaced it). now < received cannot happen on one clock.
  // Time it only waited for a CPU does not count: starved is not stuck.
  const Duration starved = std::min(a.runnable, a.elapsed);
  v.elapsed = a.elapsed - starved + (now > received ? now - received : Duration::zero());
  const TimePoint began = received - a.elapsed + starved;
  const std::string where = a.where.empty() ? "?" : a.where;
  const std::string cpu_wait = starved > Duration::zero() ? rf::str(", not counting ", seconds(starved),
                                                                     " s it waited for a CPU") : "";
  if (a.kind == Activity::Compute && v.elapsed > a.bound) {
    v.kind = LivenessVerdict::Hung;
    v.first_seen = began + a.bound;
    v.detail = rf::str("training thread computing in ", where, " for ", seconds(v.elapsed),
                       " s outside any collective", cpu_wait, " (stall bound ", seconds(a.bound), " s)");
  } else if (a.kind == Activity::Wait) {
    const auto limit = std::chrono::duration_cast<Duration>(a.bound * wedge_factor);
    if (v.elapsed <= limit) return v;
    v.kind = LivenessVerdict::Wedged;
    v.first_seen = began + limit;
    v.detail = rf::str("training thread inside one collective in ", where, " for ", seconds(v.elapsed), " s",
                       cpu_wait, ", past ", wedge_factor, " x its stall bound ", seconds(a.bound),
                       " s: its communicator is stuck");
  }
  return v;
}

}  // namespace rf::elastic
