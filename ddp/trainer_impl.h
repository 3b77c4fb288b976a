#pragma once
// Trainer::Impl — the trainer's parts, shared by its two translation units: trainer.cpp (set-up
// and the life cycle: the shell that performs worker_life.h's actions) and train_step.cpp (a
// generation of training, one step in named parts: batch, forward/backward, reduce, apply,
// then the hooks of an applied step).
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "base/clock.h"
#include "base/trace.h"
#include "core/data/data.h"
#include "ddp/audit_log.h"
#include "ddp/checkpointing.h"
#include "ddp/control_block.h"
#include "ddp/exact_reducer.h"
#include "ddp/fault_injector.h"
#include "ddp/recovery.h"
#include "ddp/step_watch.h"
#include "ddp/train_state.h"
#include "ddp/trainer.h"
#include "ddp/worker_life.h"

namespace rf::ddp {

// Samples/s over two windows: the launcher's live line (about a second) and rank 0's log line
// (log_interval steps).
struct StepRates {
  TimePoint live_since = Clock::now();
  int64_t live_samples = 0;
  double live = -1.0;  // < 0 until the first measurement
  TimePoint log_since = Clock::now();
  int64_t log_samples = 0;

  // Counts an applied step's global samples; returns the live rate.
  double add(int64_t samples);
  // Samples/s since the last log line; the next window starts now.
  double take_log_rate();
};

// When the parts of one step began, for the trace.
struct StepTimes {
  TimePoint began, forward, backward, wait, optimizer, end;
};

// One step's local batch (R3): its inputs on the model's device; the labels are in y_buf.
struct Batch {
  Tensor x;
  int64_t size = 0;
  int64_t label_offset = 0;  // where its labels begin in y_buf (exact mode's micro-shards)
};

// The step loop (R1, R2, R5) and the order of a worker's life: join, then recovery's steps
// (ddp/recovery.h) and a generation of training, until the last step, a stop or an error.
struct Trainer::Impl {
  nn::Module& model;
  LossFn loss_fn;
  const data::Dataset& ds;
  optim::Optimizer& optimizer;
  TrainerConfig cfg;
  data::Sampler sampler;
  Reducer reducer;
  std::unique_ptr<ExactReducer> exact;  // exact mode (cfg.micro_shards > 0): sums the reducer's gradients
  TrainState state;
  std::unique_ptr<FaultInjector> inj;
  std::unique_ptr<AuditLog> audit_;
  std::vector<int32_t> y_buf;
  TrainerResult result;
  int slot = 0;
  // D3: the bounds learned from this worker's step times and what the training thread does
  // (read by the heartbeat thread for the coordinator's judgement, elastic/liveness.h).
  StepWatch watch;
  Checkpointing checkpointing;
  CurrentGeneration current;
  // Before recovery, which records into it from the heartbeat thread too.
  Tracer tracer;
  // Last: destroyed first, it stops the heartbeat thread that calls back into it (step 1)
  // before any member it uses goes, also when run() ended with an exception.
  Recovery recovery;
  // The life cycle's shell: whether this worker joined once, when (train_seconds counts from
  // there), and whether it trained a generation yet (the next ones are recoveries).
  bool joined_once = false;
  TimePoint joined_at;
  bool trained = false;

  Impl(nn::Module& m, LossFn l, const data::Dataset& d, optim::Optimizer& o, TrainerConfig c);

  // --- trainer.cpp: set-up and the life cycle ----------------------------------------
  TrainerResult run();
  TrainerResult run_plain();
  void start_fault_tolerant();
  void before_fault(const elastic::FaultSpec& f, int64_t s);
  void resume_from_disk();
  WorkerEvent perform(WorkerAction action);
  WorkerEvent join();
  WorkerEvent leave();
  void final_save();
  CheckpointOrigin origin() const;
  void report_checkpoint_failures();
  void finish_result(double train_seconds);

  // --- train_step.cpp: a generation of training --------------------------------------
  // Until the generation ends: Revoked, StepFailed, Reconfigure, StopRequested or Finished.
  WorkerEvent train_generation();
  // Step s; an event when the generation ends with it.
  std::optional<WorkerEvent> train_step(int64_t s, StepRates& rates);
  Batch load_batch(int64_t s);
  // Exact mode: this rank's micro-shards of step s, one batch each (their labels one after
  // another in y_buf), and their forward and backward one by one.
  std::vector<Batch> load_shards(int64_t s);
  void shards_forward_backward(int64_t s, const std::vector<Batch>& shards, const ControlBlock& cb,
                               const TraceArgs& ta, StepTimes& t);
  // The step's global mean loss (the reducer's, exact mode's, or the program's own step's).
  double step_loss() const {
    return cfg.local_step ? local_loss : exact ? exact->global_loss() : reducer.global_loss();
  }
  // Exact mode before a generation trains: W > M is refused at the job's start (a grown
  // generation runs with ranks that have no shards, said once).
  void check_micro_shards();
  void report_fatal(const std::string& what);
  bool warned_idle_ranks = false;
  ControlBlock control_block(int64_t samples) const;
  // Forward and backward with the bucketed all-reduce started inside it (the reduce).
  void forward_backward(int64_t s, const Batch& batch, const ControlBlock& cb, const TraceArgs& ta, StepTimes& t);
  ControlBlock reduce(int64_t s);
  void apply(int64_t s, const TraceArgs& ta, StepTimes& t);
  // The hooks of an applied step: progress, audit, on_step, log line, verify-every, checkpoint.
  std::optional<WorkerEvent> after_apply(int64_t s, const ControlBlock& sums, StepRates& rates);
  void report_progress(int64_t s, const ControlBlock& sums, StepRates& rates);
  std::optional<WorkerEvent> verify_replicas(int64_t s);
  void trace_buckets(const TraceArgs& ta);

  // --- local_step.cpp: one rank, the program's own step (TrainerConfig::local_step) ----
  std::optional<WorkerEvent> local_train_step(int64_t s, StepRates& rates);
  double local_loss = 0.0;  // its global mean loss (step_loss)
};

}  // namespace rf::ddp
