#pragma once
// The NCCL backend's shell, private to comm/nccl/ (nccl_form.cpp: forming, shrinking and
// tearing down; nccl_communicator.cpp: the wait loop and revocation; nccl_collectives.cpp:
// starting and launching operations): NCCL and CUDA calls around the pure parts
// (unique_id.h, wait_loop.h, regroup.h, determinism.h), which decide everything. Included
// only where nccl.h is available (RINGFENCE_HAVE_NCCL). tests/nccl_double compiles these
// same files against a CPU test double of NCCL and the CUDA runtime.
//
// Launching. The communicator is non-blocking (config.blocking = 0): an NCCL call may
// answer ncclInProgress, and until ncclCommGetAsyncError says ncclSuccess NCCL allows no
// other call on the communicator and no CUDA call on its stream. So an operation goes
// queued -> launching (NCCL said ncclInProgress) -> launched (NCCL said ncclSuccess; its
// `done` event is recorded behind the kernel then, never before), in order: one behind a
// launching operation stays queued, and the poll launches it once NCCL settles (polled
// every kLaunchPoll meanwhile, wait_loop.h). An operation is done only when launched and
// its `done` event completed (wait_loop.h).
//
// Revocation (NCCL 2.28.9). ncclCommRevoke while a call is still launching frees NCCL's
// launch job without resetting comm->groupJob: the next ncclCommGetAsyncError or
// ncclCommAbort would use freed memory. So revoke() first lets a launching call settle,
// up to kLaunchSettleBound; one that does not is never revoked (broken_: ncclCommAbort at
// teardown). After a peer's death on the network transport NCCL's proxy keeps
// ncclRemoteError, which ncclCommRevoke does not clear: the revoked communicator settles
// with it and ncclCommShrink would return it at once. So a communicator is offered for
// the next generation's shrink (can_regroup) only once it settled without an error.
//
// Streams. Each operation records `ready` on the caller's stream when it starts (the
// bucket's producer is done there); our stream waits for it, then records `started`.
// The caller's stream never waits for us: Work::wait()/test() return only after the host
// saw `done` complete, so work the caller enqueues after them is ordered behind the
// collective, and backward kernels enqueued meanwhile overlap it (communicator.h).
// `started` tells a stuck GPU from a stuck peer: an operation that never started on our
// stream waits for a kernel of this rank's (wait_loop.h, device_stuck).
//
// Devices. One process, one GPU: a thread that calls into the backend is bound to the
// communicator's device (bind_device) and stays bound; nothing switches back to device 0,
// whose context a cudaSetDevice would create (CUDA 12+).
//
// Teardown. ncclCommAbort blocks, even for a non-blocking communicator, until NCCL's
// streams drain, and those wait on the caller's stream: behind a stuck kernel it never
// returns. So it runs on a thread of its own (abort_bounded); past its bound the worker
// prints why and exits (kExitTeardownStuck), and its launcher restarts it. The bound is
// kStuckTeardownBound where this rank judged its own GPU stuck (a kernel that does not
// end: the abort cannot return), else kTeardownBound: a healthy abort joins NCCL's proxy
// threads, which poll every 500 ms, and each abort's duration is logged.
//
// Threads and locks. loop_mu_ is the ONE place an operation's state changes: whoever
// holds it (a thread in Work::wait or test(), or the watchdog thread, which runs the same
// poll() every kWatchdogPoll while operations are pending, so the stall timeout (D3) holds
// when nobody waits) observes the events, the async error and the flags, asks
// decide_wait() and acts: done, revoke, fail. Every NCCL call after forming is made under
// loop_mu_ (a non-blocking communicator is not thread-safe). abort(), abort_failed() and
// inject_drop() only set flags (under abort_mu_ for the reason) and wake the watchdog;
// the revocation happens in poll(). Lock order: loop_mu_ before abort_mu_.
//
// Chunks. NCCL runs an all-reduce as one kernel; the chunk hook sees two pieces of it:
// chunk 1 when it is enqueued (on the starting thread), chunk 2 when its done event has
// completed (on the polling thread), both under loop_mu_: the hook may call abort(),
// abort_failed() and inject_drop(), and must not start operations. "After 1 chunk"
// therefore fires while the all-reduce is in flight on the GPU.
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <string>
#include <vector>
#include <mutex>
#include <thread>

#include "base/error.h"
#include "base/str.h"
#include "comm/errors.h"
#include "comm/flight_recorder.h"
#include "comm/nccl/nccl_communicator.h"
#include "comm/nccl/staging.h"
#include "comm/nccl/version.h"
#include "comm/nccl/wait_loop.h"

// ncclCommShrink came with NCCL 2.27.3 and ncclCommRevoke with 2.28.7 (neither is in the
// headers before); without them a failure is ncclCommAbort and every generation a fresh
// init (logged when a communicator forms).
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 7)
#define RF_NCCL_HAS_REVOKE 1
#else
#define RF_NCCL_HAS_REVOKE 0
#endif
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 3)
#define RF_NCCL_HAS_SHRINK 1
#else
#define RF_NCCL_HAS_SHRINK 0
#endif

namespace rf::comm::nccl {

static_assert(RF_NCCL_HAS_REVOKE == (NCCL_VERSION_CODE >= kNcclRevokeVersion), "version.h and the guard above agree");
static_assert(RF_NCCL_HAS_SHRINK == (NCCL_VERSION_CODE >= kNcclShrinkVersion), "version.h and the guard above agree");

namespace detail {

inline constexpr auto kWaitPoll = std::chrono::microseconds(200);   // a waiting thread's poll
inline constexpr auto kWatchdogPoll = std::chrono::milliseconds(2);  // the D3 backstop's poll
inline constexpr auto kLaunchPoll = std::chrono::microseconds(20);   // either's poll while NCCL launches
inline constexpr auto kLaunchSettleBound = std::chrono::seconds(1);  // revoke() waits this for a launch
inline constexpr auto kRegroupSettleBound = std::chrono::seconds(1); // can_regroup() waits this for quiescence
inline constexpr auto kTeardownBound = std::chrono::seconds(10);     // ncclCommAbort's longest wait
inline constexpr auto kStuckTeardownBound = std::chrono::seconds(2); // ... behind this GPU's stuck kernel
inline constexpr int kExitTeardownStuck = 75;  // EX_TEMPFAIL: the launcher restarts the worker

// ncclGetLastError is NCCL's last warning anywhere in this process (one buffer for every
// thread and communicator, never cleared): it may be another communicator's, or old. So it
// is shown once, with the first error formatted after it changed, and named as what it is.
inline std::string nccl_new_warning() {
  static std::mutex mu;
  static std::string shown;
  const char* last = ncclGetLastError(nullptr);
  if (last == nullptr || *last == '\0') return "";
  std::lock_guard<std::mutex> l(mu);
  if (shown == last) return "";
  shown = last;
  return shown;
}

// "NCCL error 6: <ncclGetErrorString> (NCCL's last warning in this process: ...)"; without
// the code prefix when the text goes where decide_wait names the code already.
inline std::string nccl_text(ncclComm_t comm, ncclResult_t r, bool with_code = true) {
  const std::string warning = comm ? nccl_new_warning() : "";
  return rf::str(with_code ? rf::str("NCCL error ", static_cast<int>(r), ": ") : std::string(), ncclGetErrorString(r),
                 warning.empty() ? "" : rf::str(" (NCCL's last warning in this process: ", warning, ")"));
}

inline std::string cuda_text(cudaError_t e) { return rf::str(cudaGetErrorName(e), ": ", cudaGetErrorString(e)); }

inline ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::i64: return ncclInt64;
    case DType::u64: return ncclUint64;
  }
  throw rf::InvalidInput(rf::str("NCCL backend: unknown dtype ", static_cast<int>(t)));
}

// Makes GPU `d` current for the calling thread, for good (see "Devices" above).
inline void bind_device(int d) {
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || current != d) cudaSetDevice(d);
}

// ncclCommAbort(comm) on a thread of its own, then `after` (on that thread, once it
// returned). Waits up to `bound` for it; past that prints why (`what` names the
// communicator) and exits the process with kExitTeardownStuck: a thread stuck in NCCL
// behind a kernel that never ends cannot be got back, and the launcher restarts the worker.
void abort_bounded(ncclComm_t comm, int device, const std::string& what, std::function<void()> after = {},
                   Duration bound = kTeardownBound);

}  // namespace detail
using namespace detail;

class NcclCommunicator;

// One started operation: its Work handle. Its fields change only under the
// communicator's loop_mu_, except state/error, which test() reads after a poll.
// The NCCL call of one operation (and the copies into staging before it), made when the
// operation launches, on our stream.
using Enqueue = std::function<ncclResult_t(cudaStream_t)>;

struct NcclOp {
  NcclCommunicator* comm = nullptr;
  WaitTarget target;
  uint64_t seq = 0;
  Enqueue enqueue;
  cudaEvent_t ready = nullptr;    // on the caller's stream at start (device buffers only)
  cudaEvent_t started = nullptr;  // on our stream once it waited for `ready`
  cudaEvent_t done = nullptr;     // on our stream behind the NCCL call, once launched
  TimePoint started_at{};         // when the caller started it
  TimePoint last_progress{};
  enum State { pending, finished, failed } state = pending;
  enum class Launch : uint8_t { queued, launching, launched } launch = Launch::queued;
  std::exception_ptr error;
  StagingSlot slot;                  // host buffers only
  void* host_out = nullptr;          // copied from slot.host when done
  size_t host_out_bytes = 0;
  bool hook = false;                 // an all-reduce: chunk 2 when done
  bool on_stream = false;            // something of it reached our stream (its slot is in use)
};

class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<NcclOp> op, std::shared_ptr<NcclCommunicator> comm)
      : op_(std::move(op)), comm_(std::move(comm)) {}
  bool test() override;
  void wait(TimePoint deadline) override;

 private:
  std::shared_ptr<NcclOp> op_;
  // The communicator outlives its Work handles. Held here, not by the operation, which
  // the communicator's queue holds: no cycle.
  std::shared_ptr<NcclCommunicator> comm_;
};

class NcclCommunicator : public Communicator, public std::enable_shared_from_this<NcclCommunicator> {
 public:
  NcclCommunicator(const CommOptions& o, NcclCommunicator* previous);
  ~NcclCommunicator() override;
  void start_watchdog() {
    watchdog_ = std::thread([this] {
      bind_device(device_);
      watchdog_main();
    });
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  uint64_t generation() const override { return generation_; }

  WorkPtr allreduce_start(Buffer buf, OpId id, Stream stream) override;
  WorkPtr broadcast_start(Buffer buf, int root, OpId id, Stream stream) override;
  WorkPtr allgather_start(Buffer in, Buffer out, OpId id, Stream stream) override;
  WorkPtr barrier_start(OpId id) override;
  WorkPtr send_start(int peer, const void* data, size_t bytes, OpId id) override;
  WorkPtr recv_start(int peer, void* data, size_t bytes, OpId id) override;

  void abort(const std::string& reason) override { request_abort(reason, false); }
  void abort_failed(const std::string& reason) override { request_abort(reason, true); }
  bool aborted() const override { return abort_flag_.load(std::memory_order_acquire); }
  void inject_drop() override {
    drop_flag_.store(true, std::memory_order_release);
    cv_.notify_all();
  }
  void set_stall_timeout(Duration t) override {
    stall_ns_.store(std::chrono::duration_cast<std::chrono::nanoseconds>(t).count(), std::memory_order_relaxed);
  }
  Duration stall_timeout() const override {
    return std::chrono::nanoseconds(stall_ns_.load(std::memory_order_relaxed));
  }

  // One poll of every pending operation (wait_loop.h); `waiting` gets `caller_deadline`.
  // Caller holds loop_mu_.
  struct PollResult {
    TimePoint next_poll = TimePoint::max();
    std::exception_ptr wait_failed;  // `waiting`'s caller deadline passed (it keeps running)
  };
  PollResult poll(NcclOp* waiting, TimePoint caller_deadline);
  std::mutex& loop_mu() { return loop_mu_; }
  std::condition_variable& cv() { return cv_; }
  const std::vector<std::string>& members() const { return members_; }
  // The communicator, if it still exists (healthy, or revoked rather than aborted).
  // Caller holds loop_mu_.
  ncclComm_t shrinkable() const { return broken_ ? nullptr : comm_; }
  // For the next generation's ncclCommShrink: shrinkable() once it settled, by `until`,
  // without an error; else null, and unshrinkable_why() says why. An error (the proxy's
  // after a peer's death) leaves the communicator only to abort (broken_, logged); one not
  // quiescent by `until` is refused this time only. Caller holds loop_mu_.
  ncclComm_t regroupable(TimePoint until) const;
  const std::string& unshrinkable_why() const { return unshrinkable_; }
  bool can_regroup() const override {
    std::lock_guard lk(loop_mu_);
    return RF_NCCL_HAS_SHRINK && regroupable(Clock::now() + kRegroupSettleBound) != nullptr;
  }
  bool poisoned() const { return poison_ != nullptr; }
  int device() const { return device_; }
  // Waits while `comm` reports ncclInProgress, up to `until` (and the abort flag when
  // `abortable`). Returns the final state; ncclInProgress when the bound passed.
  ncclResult_t settle(ncclComm_t comm, TimePoint until, bool abortable) const;

 private:
  // Refuses (rf::InvalidInput) a buffer on another GPU, or outside the registered memory
  // it names (communicator.h); the communicator goes on.
  void check_buffer(const Buffer& b, const char* what) const;
  // The one path every operation starts through (the stream contract of communicator.h).
  WorkPtr start(const char* name, OpId id, size_t bytes, Stream caller, bool device, StagingSlot slot,
                void* host_out, size_t host_out_bytes, Enqueue enqueue);
  // Makes comm_ as o.regroup says: form_shrink of `previous`, or form_fresh.
  void form(const CommOptions& o, NcclCommunicator* previous);
  void form_fresh(const CommOptions& o, ncclConfig_t& cfg);
  void form_shrink(const CommOptions& o, ncclConfig_t& cfg, NcclCommunicator& previous);
  // Launches what can be launched, in order (see "Launching"); false with `error` set
  // when NCCL or CUDA failed (the caller revokes). Caller holds loop_mu_.
  bool advance_launches(WaitObservation& error);
  bool launch(NcclOp& op, WaitObservation& error);
  bool complete_launch(NcclOp& op, WaitObservation& error);
  cudaEvent_t take_event(WaitObservation& error);
  void request_abort(const std::string& reason, bool blame_self);
  // Acts on a revoke decision: revokes (or aborts) the NCCL communicator, fails every
  // pending operation with the decision's error, dumps the flight recorder.
  void revoke(const WaitDecision& d);
  void finish(NcclOp& op, const WaitDecision& d);
  // A failed operation gives back its slot (or keeps it for teardown) and its events.
  void drop_op(NcclOp& op);
  WaitObservation observe_shared(TimePoint now);
  void watchdog_main();
  std::exception_ptr poisoned_error(const NcclOp& op) const;

  const int rank_, world_;
  const uint64_t generation_;
  const int device_;
  const std::vector<std::string> members_;
  const ChunkCallback on_chunk_;
  const std::string recorder_path_;
  FlightRecorder recorder_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::vector<cudaEvent_t> free_events_;

  mutable std::mutex loop_mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<NcclOp>> pending_;
  std::exception_ptr poison_;  // the first failure (a revoke decision's error)
  WaitDecision poison_decision_;
  // comm_ is only for ncclCommAbort now: ncclCommRevoke failed or was not safe to call, or
  // the communicator settled with an error (regroupable(), which is const: hence mutable).
  mutable bool broken_ = false;
  mutable std::string unshrinkable_;  // why regroupable() said null last
  // Slots under revoked copies: given back when our stream gets past them, after teardown.
  std::vector<StagingSlot> revoked_slots_;
  bool stop_ = false;
  std::thread watchdog_;

  std::atomic<bool> abort_flag_{false}, drop_flag_{false};
  std::atomic<int64_t> stall_ns_;
  mutable std::mutex abort_mu_;
  std::string abort_reason_;
  bool abort_blames_self_ = false;
};


}  // namespace rf::comm::nccl
