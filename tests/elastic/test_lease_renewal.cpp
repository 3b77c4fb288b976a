// A worker's side of its lease (D2, D4; elastic/lease_renewal.h): heartbeats leave on the
// period's clock whatever waits for a reply, a renewal counts from when its heartbeat left,
// and the worker's fence is never later than the coordinator's expiry. Simulated clock only.
#include <doctest/doctest.h>

#include <algorithm>
#include <deque>
#include <random>

#include "base/error.h"
#include "elastic/lease_renewal.h"

using namespace rf::elastic;
using namespace std::chrono_literals;

namespace {
const rf::TimePoint t0 = rf::TimePoint{} + 100s;
const LeaseRenewalOptions kDefaults{100ms, 1s};
}  // namespace

TEST_CASE("lease renewal: the first heartbeat one period after the join, then one per period") {
  LeaseRenewal l(kDefaults, t0);
  CHECK(l.last_renewal() == t0);
  CHECK(l.fence_at() == t0 + 1s);
  RenewalDecision d = l.decide(t0);
  CHECK(d.kind == RenewalDecision::Wait);
  CHECK(d.until == t0 + 100ms);
  CHECK(l.decide(t0 + 100ms).kind == RenewalDecision::Send);
  l.sent(t0 + 100ms);
  d = l.decide(t0 + 101ms);
  CHECK(d.kind == RenewalDecision::Wait);
  CHECK(d.until == t0 + 200ms);
  REQUIRE(l.answered() == t0 + 100ms);
  CHECK(l.last_renewal() == t0 + 100ms);
  CHECK(l.fence_at() == t0 + 1100ms);
}

TEST_CASE("lease renewal: heartbeats keep leaving while a reply is late (a lost segment must not hold back the next)") {
  // The reply to the heartbeat of 100 ms is held up (its segment lost, waiting for TCP to
  // send it again); the next ones leave on time, and their arrival is what gets it repaired.
  LeaseRenewal l(kDefaults, t0);
  for (int k = 1; k <= 5; ++k) {
    const rf::TimePoint t = t0 + k * 100ms;
    REQUIRE(l.decide(t).kind == RenewalDecision::Send);
    l.sent(t);
  }
  CHECK(l.in_flight() == 5);
  CHECK(l.last_renewal() == t0);  // nothing answered: the lease still runs from the join
  // The hole is repaired at 620 ms: five replies arrive at once, in order.
  for (int k = 1; k <= 5; ++k) REQUIRE(l.answered() == t0 + k * 100ms);
  CHECK(l.answered() == std::nullopt);  // a reply nobody asked for
  CHECK(l.last_renewal() == t0 + 500ms);
  CHECK(l.decide(t0 + 620ms).kind == RenewalDecision::Send);  // the period's clock went on
}

TEST_CASE("lease renewal: without replies it fences exactly one lease after the last renewal, not before") {
  LeaseRenewal l(kDefaults, t0);
  rf::TimePoint t = t0;
  int sends = 0;
  while (l.decide(t).kind != RenewalDecision::Fence) {
    const RenewalDecision d = l.decide(t);
    if (d.kind == RenewalDecision::Send) {
      l.sent(t);
      ++sends;
      continue;
    }
    REQUIRE(d.until > t);
    t = d.until;  // the heartbeat thread sleeps until then
  }
  CHECK(t == t0 + 1s);
  CHECK(l.decide(t0 + 999ms).kind != RenewalDecision::Fence);
  // The tenth heartbeat would leave at 1000 ms, the fence's instant, where the fence comes
  // first; heartbeats a period apart never reach the bound on those in flight.
  CHECK(sends == 9);
  CHECK(l.in_flight() == 9);
  CHECK(l.max_in_flight() == 10);
}

TEST_CASE("lease renewal: a thread that woke late sends one heartbeat, not the ones it missed") {
  LeaseRenewal l(kDefaults, t0);
  REQUIRE(l.decide(t0 + 450ms).kind == RenewalDecision::Send);
  l.sent(t0 + 450ms);
  const RenewalDecision d = l.decide(t0 + 451ms);
  CHECK(d.kind == RenewalDecision::Wait);
  CHECK(d.until == t0 + 550ms);
}

TEST_CASE("lease renewal: the options are checked") {
  CHECK_THROWS_AS(LeaseRenewal({0ms, 1s}, t0), rf::InvalidInput);
  CHECK_THROWS_AS(LeaseRenewal({1s, 1s}, t0), rf::InvalidInput);
  CHECK_NOTHROW(LeaseRenewal({100ms, 1s}, t0));
}

TEST_CASE("D4 safety: whatever the delays either way, the worker never holds the lease past the coordinator's expiry") {
  // One connection, in order both ways (TCP): a heartbeat arrives no earlier than the one
  // before it, and its reply likewise. The coordinator renews on arrival (expiry = arrival +
  // lease, as Membership::heartbeat); the worker renews on the reply, from the send instant.
  // Delays are drawn with a heavy tail (a lossy link: mostly 0-5 ms, sometimes retransmission
  // timeouts up to 1.5 s), independently for requests and replies.
  std::mt19937_64 rng(20240607);
  auto delay = [&]() -> rf::Duration {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    if (u < 0.8) return std::chrono::microseconds(std::uniform_int_distribution<int>(0, 5000)(rng));
    return std::chrono::milliseconds(std::uniform_int_distribution<int>(200, 1500)(rng));
  };
  for (int run = 0; run < 200; ++run) {
    // The join: the coordinator joins the worker when its admission arrives, after it left.
    rf::TimePoint coord_expiry = t0 + delay() + 1s;  // the coordinator's, as of now
    LeaseRenewal l(kDefaults, t0);
    struct Heartbeat {
      rf::TimePoint arrives, answered;
    };
    std::deque<Heartbeat> arriving, answering;
    rf::TimePoint last_arrival = t0, last_reply = t0;
    bool fenced = false;
    for (rf::TimePoint t = t0; t < t0 + 5s && !fenced; t += 1ms) {
      while (!arriving.empty() && arriving.front().arrives <= t) {
        coord_expiry = std::max(coord_expiry, arriving.front().arrives + 1s);
        answering.push_back(arriving.front());
        arriving.pop_front();
      }
      while (!answering.empty() && answering.front().answered <= t) {
        answering.pop_front();
        REQUIRE(l.answered().has_value());
      }
      // The worker holds the lease until fence_at(), the coordinator until coord_expiry.
      CHECK(l.fence_at() <= coord_expiry);
      const RenewalDecision d = l.decide(t);
      if (d.kind == RenewalDecision::Fence) {
        fenced = true;
      } else if (d.kind == RenewalDecision::Send) {
        l.sent(t);
        last_arrival = std::max(last_arrival, t + delay());
        last_reply = std::max(last_reply, last_arrival + delay());
        arriving.push_back({last_arrival, last_reply});
      }
    }
  }
}
