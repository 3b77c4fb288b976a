#pragma once
// When a round closes (docs/protocol.md step 3), as a pure function of (now, what the round has
// seen, options): Membership feeds it on every event and tick; unit tests feed it a
// simulated clock (torchft's quorum_compute is the model).
//
//   a live member of the previous generation has not reported  -> Wait (it is alive: a stuck
//                                   member is evicted by its activity, elastic/liveness.h)
//   the target world size reported                             -> Close
//   the window passed and at least min_world reported          -> Close (shrink)
//   the window and min_world_timeout passed, fewer reported    -> Stop (below min world)
//   otherwise                                                  -> Wait (for joiners)
//
// Every deadline counts from this round's own start: a round opened by a failure during
// the previous round (g+1 revoked into g+2) gets the whole window and the whole wait for
// the minimum world again, so a hung member evicted late cannot leave its replacement no
// time to start.
#include <string>

#include "base/clock.h"
#include "base/enum_names.h"
#include "elastic/membership_types.h"

namespace rf::elastic {

struct RoundView {
  uint64_t generation = 0;   // the one being formed (for the error text)
  bool forming = false;      // the first round (generation 1)
  TimePoint started;         // when this round opened
  int reported = 0;          // live workers that reported for this round
  int primaries_reported = 0;  // ... of them slots < target world (forming waits for these)
  int members_missing = 0;   // live members of the previous generation that have not reported
};

struct RoundDecision {
  enum Kind { Wait, Close, Stop } kind = Wait;
  enum class Reason {
    MembersMissing,   // Wait: a live member has not reported yet
    WindowOpen,       // Wait: joiners may still come before the window ends
    BelowMinWorld,    // Wait (until the deadline) / Stop (at it): fewer than min_world reported
    TargetReached,    // Close: the target world size reported
    WindowPassed,     // Close: the window passed with at least min_world (a shrink)
  } reason = Reason::WindowOpen;
  TimePoint deadline;  // Wait: when the decision can change by time alone
  std::string error;   // Stop: the job's error text
};
inline constexpr EnumName<RoundDecision::Reason> kRoundReasonNames[] = {
    {RoundDecision::Reason::MembersMissing, "members_missing"},
    {RoundDecision::Reason::WindowOpen, "window_open"},
    {RoundDecision::Reason::BelowMinWorld, "below_min_world"},
    {RoundDecision::Reason::TargetReached, "target_reached"},
    {RoundDecision::Reason::WindowPassed, "window_passed"},
};
static_assert(lists_each_once(kRoundReasonNames));
const char* to_string(RoundDecision::Reason r);

RoundDecision decide_round(TimePoint now, const RoundView& view, const MembershipOptions& options);

}  // namespace rf::elastic
