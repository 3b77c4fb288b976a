#include "comm/nccl/wait_loop.h"

#include <algorithm>

#include "base/error.h"
#include "base/str.h"
#include "comm/flight_recorder.h"

namespace rf::comm::nccl {

namespace {

double seconds(Duration d) { return std::chrono::duration<double>(d).count(); }

CommErrorInfo info_of(const WaitTarget& t) {
  CommErrorInfo i;
  i.rank = t.rank;
  i.collective = t.collective;
  i.generation = static_cast<int64_t>(t.generation);
  i.step = static_cast<int64_t>(t.step);
  i.op = t.op;
  return i;
}

WaitDecision failure(WaitAction action, ErrorKind kind, CommErrorInfo info) {
  WaitDecision d;
  d.action = action;
  d.kind = kind;
  d.error = std::move(info);
  return d;
}

// The stall deadline, saturating: a huge stall timeout means "never", not an overflow.
TimePoint stall_deadline(TimePoint last_progress, Duration stall) {
  if (stall > TimePoint::max() - last_progress) return TimePoint::max();
  return last_progress + stall;
}

}  // namespace

bool judge_device_stuck(bool started, Duration waiting, Duration stall_timeout) {
  return !started && waiting >= stall_timeout / 2;
}

WaitDecision decide_wait(const WaitTarget& t, const WaitObservation& o, const WaitOptions& opt) {
  if (opt.poll_interval <= Duration::zero() || opt.launch_poll_interval <= Duration::zero()) {
    throw rf::InvalidInput(rf::str("NCCL wait loop: poll interval ", seconds(opt.poll_interval), " s, launch poll interval ",
                                   seconds(opt.launch_poll_interval), " s; both must be positive"));
  }
  if (o.abort_requested) {
    CommErrorInfo i = info_of(t);
    i.cause = o.abort_reason.empty() ? std::string("abort() without a reason") : o.abort_reason;
    WaitDecision d = failure(WaitAction::revoke, ErrorKind::aborted, std::move(i));
    d.blame_self = o.abort_failed;
    return d;
  }
  if (o.async == AsyncState::error) {
    CommErrorInfo i = info_of(t);
    i.cause = rf::str("NCCL async error ", o.async_code, ": ", o.async_text.empty() ? "(no text)" : o.async_text);
    return failure(WaitAction::revoke, ErrorKind::peer_failed, std::move(i));
  }
  if (o.event == EventState::error) {
    CommErrorInfo i = info_of(t);
    i.peer = t.rank;
    i.cause = rf::str("CUDA error on this rank's stream: ", o.event_error.empty() ? "(no text)" : o.event_error);
    return failure(WaitAction::revoke, ErrorKind::peer_failed, std::move(i));
  }
  if (o.launched && o.event == EventState::done) {
    WaitDecision d;
    d.action = WaitAction::done;
    return d;
  }
  const TimePoint stall_at = stall_deadline(o.last_progress, opt.stall_timeout);
  if (o.now >= stall_at) {
    CommErrorInfo i = info_of(t);
    const std::string stalled =
        rf::str("no progress for ", seconds(o.now - o.last_progress), " s, stall bound ", seconds(opt.stall_timeout), " s");
    if (!o.started) {
      i.peer = t.rank;
      i.device_stuck = true;
      i.cause = rf::str("gpu_stuck: this rank's GPU never reached the operation (", stalled,
                        "): a kernel ahead of it on the caller's stream does not end");
      return failure(WaitAction::revoke, ErrorKind::peer_failed, std::move(i));
    }
    i.cause = o.launched ? stalled : rf::str(stalled, "; NCCL still had the call in progress (ncclInProgress)");
    return failure(WaitAction::revoke, ErrorKind::timed_out, std::move(i));
  }
  if (o.now >= opt.caller_deadline) {
    CommErrorInfo i = info_of(t);
    i.cause = "wait deadline passed; the collective keeps running";
    return failure(WaitAction::fail, ErrorKind::timed_out, std::move(i));
  }
  WaitDecision d;
  d.action = WaitAction::keep_polling;
  const Duration interval = o.async == AsyncState::in_progress ? opt.launch_poll_interval : opt.poll_interval;
  const TimePoint by_interval = interval > TimePoint::max() - o.now ? TimePoint::max() : o.now + interval;
  d.next_poll = std::min({by_interval, stall_at, opt.caller_deadline});
  return d;
}

const char* action_name(WaitAction a) { return name_of(kWaitActionNames, a); }

std::exception_ptr decision_error(const WaitDecision& d) {
  if (d.action != WaitAction::fail && d.action != WaitAction::revoke) return nullptr;
  switch (d.kind) {
    case ErrorKind::aborted: return std::make_exception_ptr(Aborted(d.error));
    case ErrorKind::timed_out: return std::make_exception_ptr(TimedOut(d.error));
    case ErrorKind::peer_failed: return std::make_exception_ptr(PeerFailed(d.error));
    case ErrorKind::none: break;
  }
  return std::make_exception_ptr(rf::Error(rf::str("NCCL wait loop: a '", action_name(d.action),
                                                   "' decision without an error kind")));
}

void record_decision(FlightRecorder& recorder, uint64_t seq, const WaitDecision& d) {
  switch (d.action) {
    case WaitAction::done: recorder.finish(seq, -1, -1); return;
    case WaitAction::revoke: recorder.fail(seq, -1, d.error.peer, d.error.cause); return;
    case WaitAction::keep_polling:
    case WaitAction::fail: return;
  }
}

}  // namespace rf::comm::nccl
