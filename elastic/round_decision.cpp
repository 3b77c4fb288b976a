#include "elastic/round_decision.h"

#include "base/str.h"

namespace rf::elastic {

const char* to_string(RoundDecision::Reason r) { return name_of(kRoundReasonNames, r); }

RoundDecision decide_round(TimePoint now, const RoundView& v, const MembershipOptions& o) {
  using R = RoundDecision::Reason;
  RoundDecision d;
  if (v.members_missing > 0) {
    d.reason = R::MembersMissing;
    d.deadline = TimePoint::max();  // an event (a report, an eviction) changes it, not time
    return d;
  }
  // Forming waits for the primaries (slots 0..W-1; the launcher numbers spares after
  // them), so generation 1 has rank == slot and spares start as standby.
  if ((v.forming ? v.primaries_reported : v.reported) >= o.target_world) {
    d.kind = RoundDecision::Close;
    d.reason = R::TargetReached;
    return d;
  }
  const TimePoint window_end = v.started + (v.forming ? o.form_timeout : o.join_window);
  if (now < window_end) {
    d.reason = R::WindowOpen;
    d.deadline = window_end;
    return d;
  }
  if (v.reported >= o.min_world) {
    d.kind = RoundDecision::Close;
    d.reason = R::WindowPassed;
    return d;
  }
  d.reason = R::BelowMinWorld;
  d.deadline = window_end + o.min_world_timeout;
  if (now < d.deadline) return d;
  d.kind = RoundDecision::Stop;
  d.error = rf::str("only ", v.reported, " worker(s) reported for generation ", v.generation, ", fewer than the minimum world size ",
                    o.min_world, ", after waiting ", std::chrono::duration<double>(now - v.started).count(),
                    " s (the join window ", std::chrono::duration<double>(window_end - v.started).count(),
                    " s, then --min-world-timeout ", std::chrono::duration<double>(o.min_world_timeout).count(), " s)");
  return d;
}

}  // namespace rf::elastic
