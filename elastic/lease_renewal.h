#pragma once
// LeaseRenewal — a worker's side of its lease (docs/protocol.md D2, D4), pure: decisions are
// a function of (now, the heartbeats sent and answered, options), unit-tested on a simulated
// clock; the Client's heartbeat thread only carries them out.
//
// Heartbeats leave on the period's clock, one every `heartbeat`, never waiting for the
// previous reply. A request/reply heartbeat leaves the member connection idle behind a lost
// segment, and on an idle TCP connection only the retransmission timer repairs a loss: 200 ms,
// doubling at each loss of the same segment, so three losses in a row are 1.4 s, past a 1 s
// lease (a host losing 20 % of its packets meets that every few seconds). While heartbeats
// keep leaving, the next one's arrival makes the coordinator acknowledge past the hole and
// the loss is repaired within about one period (fast retransmit, RACK), at any loss rate
// where a renewal still gets through.
//
// Which instant a renewal counts from. The coordinator renews the lease when a heartbeat
// *arrives* (its expiry: arrival + lease). The worker cannot see that instant, only when it
// sent the heartbeat (before) and when the reply came (after). A renewal counts from the
// send instant of the heartbeat its reply answers, so the worker's fence (renewal + lease)
// is never later than the coordinator's expiry: D4's safety, whatever the delays either
// way. Replies come in order on one connection, so a reply answers the oldest heartbeat in
// flight. The join counts as the first renewal, from the instant the admission message the
// coordinator joins it on left.
//
// At most max_in_flight() heartbeats wait for replies (lease / heartbeat); past one lease
// from the last renewal the worker fences whatever is in flight.
#include <cstddef>
#include <deque>
#include <optional>

#include "base/clock.h"
#include "base/enum_names.h"

namespace rf::elastic {

struct LeaseRenewalOptions {
  Duration heartbeat = std::chrono::milliseconds(100);
  Duration lease = std::chrono::seconds(1);
};

struct RenewalDecision {
  // Send: a heartbeat is due now. Wait: nothing to do before `until` but read replies.
  // Fence: one lease has passed since the last renewal (D4).
  enum Kind { Send, Wait, Fence } kind = Wait;
  TimePoint until;  // Wait: the next heartbeat's time, or the fence's
};
inline constexpr EnumName<RenewalDecision::Kind> kRenewalKindNames[] = {
    {RenewalDecision::Send, "send"}, {RenewalDecision::Wait, "wait"}, {RenewalDecision::Fence, "fence"}};
static_assert(lists_each_once(kRenewalKindNames));
const char* to_string(RenewalDecision::Kind k);  // send, wait, fence

class LeaseRenewal {
 public:
  // Throws rf::InvalidInput unless 0 < heartbeat < lease.
  LeaseRenewal(LeaseRenewalOptions options, TimePoint joined);

  RenewalDecision decide(TimePoint now) const;
  // A heartbeat left at `now` (read before it was written: never later than it left).
  void sent(TimePoint now);
  // The reply to the oldest heartbeat in flight came: the lease is renewed from that
  // heartbeat's send instant, which is returned. nullopt when none is in flight (a reply
  // nobody asked for: the caller treats it as a protocol error).
  std::optional<TimePoint> answered();

  TimePoint last_renewal() const { return last_renewal_; }
  TimePoint fence_at() const { return last_renewal_ + opt_.lease; }
  size_t in_flight() const { return in_flight_.size(); }
  size_t max_in_flight() const;

 private:
  LeaseRenewalOptions opt_;
  TimePoint last_renewal_;
  TimePoint next_send_;
  std::deque<TimePoint> in_flight_;  // send instants, oldest first
};

}  // namespace rf::elastic
