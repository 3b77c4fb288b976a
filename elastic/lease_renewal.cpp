#include "elastic/lease_renewal.h"

#include <algorithm>

#include "base/error.h"

namespace rf::elastic {

const char* to_string(RenewalDecision::Kind k) { return name_of(kRenewalKindNames, k); }

LeaseRenewal::LeaseRenewal(LeaseRenewalOptions options, TimePoint joined)
    : opt_(options), last_renewal_(joined), next_send_(joined + options.heartbeat) {
  if (opt_.heartbeat <= Duration::zero() || opt_.heartbeat >= opt_.lease)
    throw rf::InvalidInput("the heartbeat must be positive and shorter than the lease");
}

size_t LeaseRenewal::max_in_flight() const {
  return static_cast<size_t>(std::max<Duration::rep>(1, opt_.lease / opt_.heartbeat));
}

RenewalDecision LeaseRenewal::decide(TimePoint now) const {
  if (now >= fence_at()) return {RenewalDecision::Fence, fence_at()};
  const bool may_send = in_flight_.size() < max_in_flight();
  if (may_send && now >= next_send_) return {RenewalDecision::Send, now};
  return {RenewalDecision::Wait, may_send ? std::min(next_send_, fence_at()) : fence_at()};
}

void LeaseRenewal::sent(TimePoint now) {
  in_flight_.push_back(now);
  // The period's clock restarts at each send: a thread that woke late sends one heartbeat,
  // not a burst of the ones it missed.
  next_send_ = now + opt_.heartbeat;
}

std::optional<TimePoint> LeaseRenewal::answered() {
  if (in_flight_.empty()) return std::nullopt;
  const TimePoint s = in_flight_.front();
  in_flight_.pop_front();
  last_renewal_ = std::max(last_renewal_, s);
  return s;
}

}  // namespace rf::elastic
