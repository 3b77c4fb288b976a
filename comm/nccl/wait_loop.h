#pragma once
// The NCCL backend's wait loop as a pure state machine (docs/design.md, "Backends": one
// wait loop). The shell (comm/nccl/nccl_communicator.cpp) polls, on one thread, what can
// end an operation — its CUDA event, ncclCommGetAsyncError, our abort flag — and hands one
// observation per poll to decide_wait(), which says what to do next. Time is an argument,
// so the tests drive it on a simulated clock.
//
// Order within one poll (the first that applies wins):
//   1. our abort flag            -> revoke, Aborted(reason) naming the generation; first,
//                                   as in the UCX backend: a revoked generation is over
//                                   even for an operation whose event has just completed
//   2. an NCCL async error       -> revoke, PeerFailed (NCCL cannot say which peer: -1)
//                                   with NCCL's code and text
//   3. an error from the event   -> revoke, PeerFailed naming this rank (its device or
//                                   stream failed)
//   4. launched and the event    -> done. Launched: NCCL answered the call ncclSuccess (a
//      completed                    non-blocking call may answer ncclInProgress, and only
//                                   then is the `done` event recorded behind its kernel);
//                                   an event recorded before that says nothing.
//   5. the stall deadline passed -> revoke: PeerFailed naming THIS rank, device_stuck, when
//                                   the operation never started on our stream (its start
//                                   event, behind the caller's work, never completed: a
//                                   kernel of this rank's does not end, so this rank is
//                                   the one to evict); else TimedOut with the stall it hit
//                                   (D3), saying when NCCL still had the call in progress
//   6. the caller's deadline     -> fail this wait only (TimedOut; the operation keeps
//      passed (Work::wait)          running and the stall timeout still applies)
//   7. otherwise                 -> keep polling, next at the earliest of now + the poll
//                                   interval, the stall deadline and the caller's deadline;
//                                   the launch poll interval while NCCL has a call in
//                                   progress (ncclInProgress): the operation behind it
//                                   launches only once it settles, so a short interval
//                                   there launches the next bucket promptly
// The stall deadline is last_progress + stall_timeout, read afresh at every poll, so a
// stall timeout changed mid-wait (set_stall_timeout, D3) applies from the next poll on,
// and a decision arrives no later than one poll interval after whichever deadline holds.
// "Progress" for NCCL is coarse: the shell counts the operation's start (or, queued
// behind others on one stream, the completion of the one before it) as its last progress.
//
// A revocation that came from elsewhere (abort(), the coordinator's revoke) also asks
// judge_device_stuck(): an operation that has waited half a stall bound for its start
// is this rank's stuck GPU too, and its error says so.
//
// Every failure's info carries (rank, collective, generation, step, op): NCCL has no tags,
// so these name the operation in the error and in the flight recorder.
#include <cstdint>
#include <exception>
#include <string>

#include "base/clock.h"
#include "base/enum_names.h"
#include "comm/errors.h"

namespace rf::comm {
class FlightRecorder;
}

namespace rf::comm::nccl {

// The operation being waited for.
struct WaitTarget {
  int rank = 0;
  const char* collective = "all-reduce";
  uint64_t generation = 0;
  uint64_t step = 0;
  uint32_t op = 0;
};

enum class EventState : uint8_t { pending, done, error };      // cudaEventQuery
enum class AsyncState : uint8_t { success, in_progress, error };  // ncclCommGetAsyncError

struct WaitObservation {
  TimePoint now{};
  EventState event = EventState::pending;
  std::string event_error;  // the CUDA error's name and text, when event == error
  AsyncState async = AsyncState::success;
  int async_code = 0;       // the ncclResult_t, when async == error
  std::string async_text;   // ncclGetErrorString / ncclGetLastError, when async == error
  bool launched = true;  // NCCL answered the call ncclSuccess; `event` is meaningful only then
  bool started = true;   // the operation's start event completed (the caller's work before it ran)
  bool abort_requested = false;
  bool abort_failed = false;  // abort_failed() rather than abort(): peers must blame this rank
  std::string abort_reason;
  TimePoint last_progress{};
};

struct WaitOptions {
  Duration stall_timeout = std::chrono::seconds(30);  // D3; the communicator's current value
  Duration poll_interval = std::chrono::milliseconds(1);  // > 0
  Duration launch_poll_interval = std::chrono::microseconds(20);  // > 0; while async == in_progress
  TimePoint caller_deadline = TimePoint::max();           // Work::wait(deadline)
};

enum class WaitAction : uint8_t {
  keep_polling,  // poll again at next_poll
  done,          // the operation completed
  fail,          // this wait gives up (error); the operation keeps running
  revoke,        // revoke the communicator now (ncclCommRevoke / ncclCommAbort), then fail
                 // this and every other operation of it with `error`
};
inline constexpr EnumName<WaitAction> kWaitActionNames[] = {
    {WaitAction::keep_polling, "keep polling"}, {WaitAction::done, "done"}, {WaitAction::fail, "fail"},
    {WaitAction::revoke, "revoke"}};
static_assert(lists_each_once(kWaitActionNames));
enum class ErrorKind : uint8_t { none, aborted, timed_out, peer_failed };

struct WaitDecision {
  WaitAction action = WaitAction::keep_polling;
  TimePoint next_poll{};     // keep_polling only
  ErrorKind kind = ErrorKind::none;
  CommErrorInfo error;       // fail / revoke
  bool blame_self = false;   // revoke after abort_failed(): tell the peers this rank failed
};

// Whether an operation whose start event has not completed, `waiting` since it was
// started, shows that this rank's GPU is stuck (a kernel ahead of it on the caller's stream
// does not end): it has waited at least half the stall bound for the GPU to reach it. A
// healthy GPU reaches a bucket within a fraction of a step, and the stall bound is several
// steps (ddp/stall_bound.h).
bool judge_device_stuck(bool started, Duration waiting, Duration stall_timeout);

// Throws rf::InvalidInput for a poll interval (either) that is not positive.
WaitDecision decide_wait(const WaitTarget& target, const WaitObservation& obs, const WaitOptions& options);

const char* action_name(WaitAction a);  // "keep polling", "done", "fail", "revoke"
// The typed error of a fail / revoke decision (Aborted, TimedOut or PeerFailed), to
// rethrow from every Work of the communicator. Null for keep_polling and done.
std::exception_ptr decision_error(const WaitDecision& d);
// Ends flight record `seq` as the decision says: done, or failed with the error's peer
// and cause. Nothing for keep_polling; nothing for fail either (the operation runs on).
void record_decision(FlightRecorder& recorder, uint64_t seq, const WaitDecision& d);

}  // namespace rf::comm::nccl
