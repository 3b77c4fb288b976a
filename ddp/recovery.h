#pragma once
// Recovery — the worker's half of docs/protocol.md's recovery from generation g to g+1, one
// function per step (and per RecoveryPhase, recovery_phase.h):
//
//   abort     step 1    on revocation (the heartbeat thread) or self-fencing (D4) the
//                       communicator of g is aborted; a transport error, stall or abort
//                       seen by the training thread is reported (failure)
//   report    steps 2-4 report (step, digest), wait for the coordinator's plan
//   plan                adopt it: rank and world; a fresh start refuses another run's
//                       checkpoints, a whole-job restart restores this job's newest
//   connect   step 5    the communicator of the plan's generation, addresses through the
//                       coordinator's store (ElasticStore)
//   transfer  step 6    sources send S_T, receivers take it into a staging buffer and swap
//                       it in only after its digest checks (R6, TrainState::restore_verified)
//   verify    step 7    all-gather of (step, digest): every rank holds the same (T, S)
//   resume    step 8    ready(g+1); the step loop continues at T+1 (R3 recomputes its batch)
//
// Each phase the trainer drives returns its outcome as a WorkerEvent (ddp/worker_life.h), which
// decides the next: a failure anywhere in plan..verify is FormFailed, and the trainer reports
// again for the next generation (recovery is idempotent). The step loop and recovery share a
// CurrentGeneration; the trainer owns it, the checkpointing unit, the watch and this object.
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/trace.h"
#include "comm/communicator.h"
#include "comm/errors.h"
#include "ddp/audit_log.h"
#include "ddp/comm_options.h"
#include "ddp/checkpointing.h"
#include "ddp/fault_injector.h"
#include "ddp/recovery_phase.h"
#include "ddp/reducer.h"
#include "ddp/step_watch.h"
#include "ddp/train_state.h"
#include "ddp/trainer.h"
#include "ddp/worker_life.h"
#include "elastic/control_plane.h"

namespace rf::ddp {

// The generation this worker works in, as the step loop and recovery see it: the plan, this
// worker's rank and world in it, and its communicator.
struct CurrentGeneration {
  elastic::Plan plan;
  int rank = 0, world = 1;
  // The heartbeat thread aborts it on revocation (step 1); the training thread swaps it
  // between generations, under comm_mu.
  std::mutex comm_mu;
  std::shared_ptr<comm::Communicator> comm;
};

class Recovery {
 public:
  struct Parts {
    const TrainerConfig& cfg;
    CurrentGeneration& current;
    TrainState& state;
    Reducer& reducer;
    StepWatch& watch;
    Checkpointing& checkpointing;
    Tracer* tracer = nullptr;  // each phase a span (enter), revocations instants
  };
  explicit Recovery(Parts parts);
  // Waits for the staging thread and closes the coordinator: its heartbeats call abort().
  ~Recovery();
  Recovery(const Recovery&) = delete;
  Recovery& operator=(const Recovery&) = delete;

  // Set-up, fault tolerance on: the transport context, the coordinator (not yet joined) and
  // its step-1 callbacks. token: the job's, which keys the data plane's tags ("" = off).
  // inj and audit outlive this object's use of them.
  void start(std::shared_ptr<elastic::ControlPlane> control, std::string token, FaultInjector& inj, AuditLog& audit);
  elastic::ControlPlane* control() const { return control_.get(); }
  // Joins (again, after a self-fence). False when the job had already finished.
  bool join();
  // The staging buffer of step 6, faulted in on a thread of its own (see recovery.cpp).
  void start_staging_pretouch();
  void await_staging();

  // --- step 1 --------------------------------------------------------------------------
  // Any thread: aborts the communicator (as_failed: peers name this rank, D4).
  void abort(const std::string& why, bool as_failed = false);
  // The training thread, fault tolerance on (start() was called): tells the coordinator who
  // failed, unless it already moved on. Without a coordinator the caller rethrows instead.
  // e.info().device_stuck: this worker's own GPU is stuck; it reports itself (gpu_stuck),
  // also on Aborted and after a revocation, so the coordinator evicts it in this round.
  void failure(const comm::CommError& e);
  // Fault injection's drop: the communicator's endpoints fail now.
  void inject_drop();
  // Destroys the communicator (outside comm_mu: its destructor may run the chunk hook).
  // With NCCL it is kept instead, as the previous generation's, until the next connect()
  // has used it (ncclCommShrink, CommOptions::previous) or forget_previous().
  void drop_comm();
  // The previous generation's communicator goes (the job is over for this worker).
  void forget_previous();
  // Revoked or fenced since the plan of the current generation.
  bool generation_over() const;

  // --- steps 2-4 -----------------------------------------------------------------------
  // Drops the communicator first (drop_comm), so the report says which one it kept
  // (StateReport::comm_generation). PlanReceived: current.plan is the new plan. Fenced:
  // fenced meanwhile (join again). JobFinished: the job finished before this worker got a plan.
  WorkerEvent report();

  // --- plan, steps 5-7 -----------------------------------------------------------------
  // The whole formation of current.plan's generation: plan, connect, transfer, verify, then
  // the phase times to the coordinator. Formed, or FormFailed when it must start again at
  // report.
  WorkerEvent form();
  bool plan();
  bool connect();
  bool transfer();
  // Step 7's all-gather, also verify-every's: DivergenceError names every rank's digest on a
  // mismatch; digests of two versions (two ringfence builds) are not compared: the job stops
  // with rf::DigestVersionError. tag_step: the step the collective's tag carries; when: for
  // the message.
  void verify(uint64_t tag_step, const char* when);

  // --- step 8 --------------------------------------------------------------------------
  // ready(g): Running when g runs, Revoked when it was revoked (or this worker fenced),
  // JobFinished when the job finished. Throws elastic::JobStopped when the coordinator
  // stopped the job.
  WorkerEvent resume();

  // The trace's phase span in progress ends now (the worker leaves recovery for good).
  void end_trace_phase() { enter(std::nullopt); }

 private:
  bool form_steps();  // form() without the lost-leader case
  // Step 6's parts: the fresh start (nothing to send), every image this rank sends, and the
  // one it receives (R6).
  void start_fresh();
  void send_images(int64_t redo);
  void receive_image(int source, int64_t redo, double staging_wait_ms);
  // The phase recovery is in (nullopt: back to training), for the audit lines and comm's
  // flight recorder.
  void enter(std::optional<RecoveryPhase> phase);
  elastic::StateReport state_report() const;
  // An error every worker and every restart would meet again: the coordinator stops the
  // job with it (the launcher's last line) instead of restarting us. Best effort.
  void tell_fatal(const std::string& error);

  const TrainerConfig& cfg_;
  CurrentGeneration& cur_;
  TrainState& state_;
  Reducer& reducer_;
  StepWatch& watch_;
  Checkpointing& ckpt_;
  int slot_ = 0;
  std::string token_;
  FaultInjector* inj_ = nullptr;
  AuditLog* audit_ = nullptr;
  std::shared_ptr<elastic::ControlPlane> control_;
  // NCCL only: the last communicator dropped, for the next generation's shrink. Only the
  // training thread touches it (drop_comm, connect); the heartbeat thread aborts cur_.comm.
  std::shared_ptr<comm::Communicator> previous_;
  std::chrono::milliseconds comm_stall_{0};  // the new generation's D3 (StepWatch::begin_recovery)
  std::vector<std::byte> staging_;           // the image buffer, reused by every transfer (R6)
  uint64_t staging_size_ = 0;
  std::thread staging_thread_;
  double connect_ms_ = 0, staging_wait_ms_ = 0;
  Tracer* tracer_ = nullptr;
  std::optional<RecoveryPhase> traced_;  // the phase whose span is open, since traced_since_
  TimePoint traced_since_;
};

}  // namespace rf::ddp
