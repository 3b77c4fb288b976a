// The NCCL wait loop's state machine (comm/nccl/wait_loop.h) on a simulated clock: each
// decision, their order within one poll, the stall timeout changed mid-wait, the
// deadline measured from the last progress, and how late a decision can be.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "base/error.h"
#include "comm/errors.h"
#include "comm/flight_recorder.h"
#include "comm/nccl/wait_loop.h"

using namespace rf::comm;
using namespace rf::comm::nccl;
using namespace std::chrono_literals;
using rf::Duration;
using rf::TimePoint;

namespace {

const TimePoint t0 = TimePoint{} + 1000s;  // the simulated clock's origin

WaitTarget target() {
  WaitTarget t;
  t.rank = 1;
  t.collective = "all-reduce";
  t.generation = 3;
  t.step = 812;
  t.op = 2;
  return t;
}

WaitObservation at(Duration since_t0) {
  WaitObservation o;
  o.now = t0 + since_t0;
  o.last_progress = t0;
  return o;
}

WaitOptions stall(Duration s, Duration poll = 1ms) {
  WaitOptions w;
  w.stall_timeout = s;
  w.poll_interval = poll;
  return w;
}

std::string what_of(const WaitDecision& d) {
  const std::exception_ptr error = decision_error(d);
  if (!error) return "(no error: " + std::string(action_name(d.action)) + ")";
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  }
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Polls as the shell does, at each decision's next_poll, until something other than
// keep_polling; `observe` fills in what is seen at a given time.
template <typename Observe>
WaitDecision run(Observe observe, const WaitOptions& opt, TimePoint start = t0, int max_polls = 1000000) {
  TimePoint now = start;
  for (int n = 0; n < max_polls; ++n) {
    WaitObservation o = observe(now);
    o.now = now;
    const WaitDecision d = decide_wait(target(), o, opt);
    if (d.action != WaitAction::keep_polling) return d;
    REQUIRE(d.next_poll > now);
    REQUIRE(d.next_poll <= now + opt.poll_interval);
    now = d.next_poll;
  }
  FAIL("no decision");
  return {};
}

}  // namespace

TEST_CASE("nothing yet: keep polling, next one poll interval on") {
  const WaitDecision d = decide_wait(target(), at(10ms), stall(1s, 2ms));
  CHECK(d.action == WaitAction::keep_polling);
  CHECK(d.next_poll == t0 + 12ms);
  CHECK(d.kind == ErrorKind::none);
  CHECK(decision_error(d) == nullptr);
}

TEST_CASE("ncclInProgress from the async error check is no error: keep polling, at the launch poll interval") {
  WaitObservation o = at(5ms);
  o.async = AsyncState::in_progress;
  WaitOptions opt = stall(1s, 2ms);
  opt.launch_poll_interval = 30us;
  const WaitDecision d = decide_wait(target(), o, opt);
  CHECK(d.action == WaitAction::keep_polling);
  // The operation behind a launching one waits for it to settle: polled 30 us on, not 2 ms.
  CHECK(d.next_poll == t0 + 5ms + 30us);
  o.async = AsyncState::success;
  CHECK(decide_wait(target(), o, opt).next_poll == t0 + 7ms);
}

TEST_CASE("the event completed: done") {
  WaitObservation o = at(5ms);
  o.event = EventState::done;
  const WaitDecision d = decide_wait(target(), o, stall(1s));
  CHECK(d.action == WaitAction::done);
  CHECK(decision_error(d) == nullptr);
}

TEST_CASE("our abort flag: revoke, Aborted naming the generation, the op and the reason") {
  WaitObservation o = at(5ms);
  o.abort_requested = true;
  o.abort_reason = "coordinator revoked g=3";
  const WaitDecision d = decide_wait(target(), o, stall(1s));
  CHECK(d.action == WaitAction::revoke);
  CHECK(d.kind == ErrorKind::aborted);
  CHECK_FALSE(d.blame_self);
  REQUIRE(decision_error(d) != nullptr);
  CHECK_THROWS_AS(std::rethrow_exception(decision_error(d)), Aborted);
  CHECK(what_of(d) == "rank 1: all-reduce g=3 s=812 op=2: aborted (coordinator revoked g=3)");
  CHECK(d.error.peer == -1);
  o.abort_failed = true;  // abort_failed(): the same locally, and the shell tells the peers
  const WaitDecision f = decide_wait(target(), o, stall(1s));
  CHECK(f.kind == ErrorKind::aborted);
  CHECK(f.blame_self);
}

TEST_CASE("an NCCL async error: revoke, PeerFailed with NCCL's code and text") {
  WaitObservation o = at(5ms);
  o.async = AsyncState::error;
  o.async_code = 6;
  o.async_text = "remote process exited or there was a network error";
  const WaitDecision d = decide_wait(target(), o, stall(1s));
  CHECK(d.action == WaitAction::revoke);
  CHECK(d.kind == ErrorKind::peer_failed);
  REQUIRE(decision_error(d) != nullptr);
  CHECK_THROWS_AS(std::rethrow_exception(decision_error(d)), PeerFailed);
  const std::string w = what_of(d);
  CHECK_MESSAGE(has(w, "g=3 s=812 op=2"), w);
  CHECK_MESSAGE(has(w, "a peer failed (NCCL async error 6: remote process exited"), w);
}

TEST_CASE("an error from the operation's event: revoke, PeerFailed naming this rank") {
  WaitObservation o = at(5ms);
  o.event = EventState::error;
  o.event_error = "cudaErrorIllegalAddress: an illegal memory access was encountered";
  const WaitDecision d = decide_wait(target(), o, stall(1s));
  CHECK(d.action == WaitAction::revoke);
  CHECK(d.kind == ErrorKind::peer_failed);
  CHECK(d.error.peer == 1);
  CHECK_MESSAGE(has(what_of(d), "peer 1 failed (CUDA error on this rank's stream: cudaErrorIllegalAddress"),
                what_of(d));
}

TEST_CASE("the stall deadline: revoke, TimedOut with the stall it hit") {
  const WaitDecision before = decide_wait(target(), at(999ms), stall(1s));
  CHECK(before.action == WaitAction::keep_polling);
  CHECK(before.next_poll == t0 + 1000ms);  // never past the deadline
  const WaitDecision d = decide_wait(target(), at(1000ms), stall(1s));
  CHECK(d.action == WaitAction::revoke);
  CHECK(d.kind == ErrorKind::timed_out);
  REQUIRE(decision_error(d) != nullptr);
  CHECK_THROWS_AS(std::rethrow_exception(decision_error(d)), TimedOut);
  CHECK(what_of(d) == "rank 1: all-reduce g=3 s=812 op=2: timed out (no progress for 1 s, stall bound 1 s)");
}

TEST_CASE("the caller's deadline: this wait fails with TimedOut, nothing is revoked") {
  WaitOptions opt = stall(10s, 5ms);
  opt.caller_deadline = t0 + 12ms;
  const WaitDecision mid = decide_wait(target(), at(10ms), opt);
  CHECK(mid.next_poll == t0 + 12ms);
  const WaitDecision d = decide_wait(target(), at(12ms), opt);
  CHECK(d.action == WaitAction::fail);
  CHECK(d.kind == ErrorKind::timed_out);
  CHECK_MESSAGE(has(what_of(d), "keeps running"), what_of(d));
}

TEST_CASE("several in one poll: abort, then async error, then event error, then done, then the stall") {
  WaitObservation o = at(2s);  // past the 1 s stall deadline
  o.event = EventState::done;
  o.event_error = "";
  o.async = AsyncState::error;
  o.async_code = 2;
  o.async_text = "system error";
  o.abort_requested = true;
  o.abort_reason = "stop";
  WaitOptions opt = stall(1s);
  opt.caller_deadline = t0;  // passed too
  // Abort wins over everything, completion and timeout included.
  CHECK(decide_wait(target(), o, opt).kind == ErrorKind::aborted);
  o.abort_requested = false;
  // An async error wins over the event's completion and the deadline.
  const WaitDecision a = decide_wait(target(), o, opt);
  CHECK(a.kind == ErrorKind::peer_failed);
  CHECK(a.error.peer == -1);
  o.async = AsyncState::error;
  o.event = EventState::error;
  CHECK(decide_wait(target(), o, opt).error.peer == -1);  // still the async error
  o.async = AsyncState::success;
  CHECK(decide_wait(target(), o, opt).error.peer == 1);  // now the event's
  o.event = EventState::done;
  CHECK(decide_wait(target(), o, opt).action == WaitAction::done);  // done beats the deadline
  o.event = EventState::pending;
  const WaitDecision s = decide_wait(target(), o, opt);
  CHECK(s.action == WaitAction::revoke);  // the stall beats the caller's deadline
  CHECK(s.kind == ErrorKind::timed_out);
}

TEST_CASE("an async error before the deadline ends the wait at the poll that sees it") {
  const TimePoint error_at = t0 + 300ms + 500us;
  const WaitDecision d = run(
      [&](TimePoint now) {
        WaitObservation o;
        o.last_progress = t0;
        if (now >= error_at) {
          o.async = AsyncState::error;
          o.async_code = 6;
          o.async_text = "remote error";
        }
        return o;
      },
      stall(1s));
  CHECK(d.kind == ErrorKind::peer_failed);
}

TEST_CASE("the deadline is measured from the last progress") {
  // Progress at 700 ms (the operation before it on the stream completed): the 1 s stall
  // deadline is 1.7 s, not 1 s.
  auto observe = [](TimePoint now) {
    WaitObservation o;
    o.last_progress = now >= t0 + 700ms ? t0 + 700ms : t0;
    return o;
  };
  TimePoint decided{};
  const WaitDecision d = run(
      [&](TimePoint now) {
        decided = now;
        return observe(now);
      },
      stall(1s));
  CHECK(d.kind == ErrorKind::timed_out);
  CHECK(decided == t0 + 1700ms);
  CHECK_MESSAGE(has(what_of(d), "no progress for 1 s"), what_of(d));
}

TEST_CASE("the stall timeout changed mid-wait applies from the next poll") {
  auto nothing = [](TimePoint) {
    WaitObservation o;
    o.last_progress = t0;
    return o;
  };
  // 30 s at first; at 200 ms the trainer lowers it to 100 ms (already passed): the next
  // poll revokes.
  TimePoint now = t0;
  WaitDecision d;
  for (;;) {
    WaitObservation o = nothing(now);
    o.now = now;
    d = decide_wait(target(), o, stall(now < t0 + 200ms ? 30s : 100ms, 1ms));
    if (d.action != WaitAction::keep_polling) break;
    REQUIRE(d.next_poll > now);  // the clock moves on: no endless loop
    now = d.next_poll;
  }
  CHECK(d.kind == ErrorKind::timed_out);
  CHECK(now == t0 + 200ms);
  CHECK_MESSAGE(has(what_of(d), "stall bound 0.1 s"), what_of(d));
  // Raised mid-wait (100 ms, then 2 s from 50 ms on): no timeout at 100 ms, at 2 s instead.
  now = t0;
  for (;;) {
    WaitObservation o = nothing(now);
    o.now = now;
    d = decide_wait(target(), o, stall(now < t0 + 50ms ? 100ms : 2s, 1ms));
    if (d.action != WaitAction::keep_polling) break;
    REQUIRE(d.next_poll > now);  // the clock moves on: no endless loop
    now = d.next_poll;
  }
  CHECK(d.kind == ErrorKind::timed_out);
  CHECK(now == t0 + 2s);
}

TEST_CASE("a decision arrives within one poll interval of the deadline, for any interval and start") {
  // The shell may poll late (scheduling): start off the interval's grid, and check that the
  // timeout decision comes at most one interval after the stall deadline. The device check
  // wants the abort within 100 ms of the deadline; the default interval is 1 ms.
  for (Duration poll : {Duration(1ms), Duration(7ms), Duration(40ms), Duration(99ms)}) {
    for (Duration offset : {Duration(0ms), Duration(3ms), Duration(13ms)}) {
      TimePoint decided{};
      const WaitDecision d = run(
          [&](TimePoint now) {
            decided = now;
            WaitObservation o;
            o.last_progress = t0;
            return o;
          },
          stall(500ms, poll), t0 + offset);
      CHECK(d.kind == ErrorKind::timed_out);
      CHECK(decided >= t0 + 500ms);
      CHECK_MESSAGE(decided - (t0 + 500ms) <= poll, "poll ", poll.count(), " offset ", offset.count());
    }
  }
  // An abort set between polls is seen by the next one.
  const TimePoint abort_at = t0 + 123ms + 400us;
  TimePoint decided{};
  const WaitDecision d = run(
      [&](TimePoint now) {
        decided = now;
        WaitObservation o;
        o.last_progress = t0;
        o.abort_requested = now >= abort_at;
        o.abort_reason = "stop";
        return o;
      },
      stall(30s, 5ms));
  CHECK(d.kind == ErrorKind::aborted);
  CHECK(decided >= abort_at);
  CHECK(decided - abort_at <= 5ms);
}

TEST_CASE("options: a non-positive poll interval is refused; a huge stall timeout never overflows") {
  CHECK_THROWS_AS(decide_wait(target(), at(0ms), stall(1s, 0ms)), rf::InvalidInput);
  WaitOptions no_launch_poll = stall(1s);
  no_launch_poll.launch_poll_interval = 0us;
  CHECK_THROWS_AS(decide_wait(target(), at(0ms), no_launch_poll), rf::InvalidInput);
  const WaitDecision d = decide_wait(target(), at(0ms), stall(Duration::max(), 1ms));
  CHECK(d.action == WaitAction::keep_polling);
  CHECK(d.next_poll == t0 + 1ms);
}

TEST_CASE("the flight recorder keeps (generation, step, op) with every NCCL operation and its end") {
  // NCCL has no tags: the record's generation, step and op are what name the operation.
  FlightRecorder fr(8, 1);
  const uint64_t ok = fr.start("all-reduce", 3, 811, 2, 4096);
  WaitObservation done = at(1ms);
  done.event = EventState::done;
  record_decision(fr, ok, decide_wait(target(), done, stall(1s)));
  const uint64_t stuck = fr.start("all-reduce", 3, 812, 2, 4096);
  record_decision(fr, stuck, decide_wait(target(), at(10ms), stall(1s)));  // keep polling: still running
  CHECK(fr.snapshot()[1].state == FlightRecord::State::started);
  record_decision(fr, stuck, decide_wait(target(), at(1s), stall(1s)));
  const auto recs = fr.snapshot();
  REQUIRE(recs.size() == 2);
  CHECK(recs[0].state == FlightRecord::State::done);
  CHECK(recs[1].state == FlightRecord::State::failed);
  std::ostringstream out;
  fr.dump(out);
  std::istringstream lines(out.str());
  std::string first, second;
  std::getline(lines, first);
  std::getline(lines, second);
  const auto j = nlohmann::json::parse(second);
  CHECK(j["tag"] == "g=3 s=812 op=2");
  CHECK(j["chunk"] == -1);
  CHECK(j["peer"] == -1);
  CHECK(j["state"] == "failed");
  CHECK(has(j["cause"].get<std::string>(), "stall bound 1 s"));
  CHECK(nlohmann::json::parse(first)["tag"] == "g=3 s=811 op=2");
}

// ---- the non-blocking launch and the start event (issue: NCCL at W >= 2) ---------------

TEST_CASE("an event that completed before NCCL launched the call is not done: keep polling") {
  // Non-blocking NCCL may answer ncclInProgress: until it says ncclSuccess its kernel is
  // not on the stream, and an event recorded there says nothing about the operation.
  WaitObservation o = at(5ms);
  o.launched = false;
  o.event = EventState::done;
  o.async = AsyncState::in_progress;
  CHECK(decide_wait(target(), o, stall(1s)).action == WaitAction::keep_polling);
  o.launched = true;
  CHECK(decide_wait(target(), o, stall(1s)).action == WaitAction::done);
}

TEST_CASE("still in progress at the stall deadline: revoke, TimedOut saying NCCL had the call in progress") {
  const WaitDecision d = run(
      [](TimePoint) {
        WaitObservation o;
        o.last_progress = t0;
        o.launched = false;
        o.event = EventState::done;
        o.async = AsyncState::in_progress;
        return o;
      },
      stall(200ms));
  CHECK(d.action == WaitAction::revoke);
  CHECK(d.kind == ErrorKind::timed_out);
  CHECK_FALSE(d.error.device_stuck);
  CHECK_MESSAGE(has(what_of(d), "NCCL still had the call in progress"), what_of(d));
}

TEST_CASE("never started on our own stream by the stall deadline: PeerFailed naming this rank, device_stuck") {
  const WaitDecision d = run(
      [](TimePoint) {
        WaitObservation o;
        o.last_progress = t0;
        o.started = false;
        return o;
      },
      stall(300ms));
  CHECK(d.action == WaitAction::revoke);
  CHECK(d.kind == ErrorKind::peer_failed);
  CHECK(d.error.device_stuck);
  CHECK(d.error.peer == target().rank);
  CHECK_THROWS_AS(std::rethrow_exception(decision_error(d)), PeerFailed);
  CHECK_MESSAGE(has(what_of(d), "gpu_stuck"), what_of(d));
  // Started, the same stall is a peer's (or the network's) doing: TimedOut, nobody named.
  const WaitDecision t = run(
      [](TimePoint) {
        WaitObservation o;
        o.last_progress = t0;
        return o;
      },
      stall(300ms));
  CHECK(t.kind == ErrorKind::timed_out);
  CHECK_FALSE(t.error.device_stuck);
  CHECK(t.error.peer == -1);
}

TEST_CASE("judge_device_stuck: half a stall bound without a start") {
  CHECK_FALSE(judge_device_stuck(true, 10s, 1s));
  CHECK_FALSE(judge_device_stuck(false, 499ms, 1s));
  CHECK(judge_device_stuck(false, 500ms, 1s));
  CHECK(judge_device_stuck(false, 5s, 1s));
}
