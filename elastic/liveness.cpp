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
  // Time it only waited for a CPU, or the whole process did not run, does not count:
  // starved or frozen is not stuck.
  const Duration starved = std::min(a.runnable, a.elapsed);
  const Duration frozen = std::min(a.frozen, a.elapsed - starved);
  v.elapsed = a.elapsed - starved - frozen + (now > received ? now - received : Duration::zero());
  const TimePoint began = received - a.elapsed + starved + frozen;
  const std::string where = a.where.empty() ? "?" : a.where;
  std::string cpu_wait;
  if (starved > Duration::zero()) cpu_wait = rf::str(", not counting ", seconds(starved), " s it waited for a CPU");
  if (frozen > Duration::zero())
    cpu_wait += rf::str(cpu_wait.empty() ? ", not counting " : " nor ", seconds(frozen),
                        " s the whole process was frozen");
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
