#pragma once
// Trainer — the resilient data-parallel training loop: a library API that takes
// a model, a loss, a dataset, an optimizer and a config, joins the job through the
// elastic client (environment from `ringfence run`), trains, and survives failures by
// docs/protocol.md's recovery, one function per step in ddp/recovery.h (Recovery: abort,
// report, plan, connect, transfer, verify, resume). Disk checkpoints are
// ddp/checkpointing.h's, the stall bounds the heartbeats carry ddp/step_watch.h's.
//
// The normal step follows R1/R2: forward (loss = SUM over local samples), backward with
// bucketed all-reduce overlapping it (Reducer), the control block (global sample count,
// R5 flags) in the last bucket, and the optimizer update as the only writer of S. After
// recovery's step 8 the loop resumes at T+1; the batch of a step depends on (seed, s), its
// split on (rank, W) (R3), so a redone step computes exactly the same samples.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/error.h"
#include "ckpt/checkpoint_dir.h"
#include "comm/communicator.h"
#include "core/data/dataset.h"
#include "core/nn/module.h"
#include "core/optim/optimizer.h"
#include "core/tensor.h"
#include "ddp/reducer.h"
#include "ddp/stall_bound.h"
#include "elastic/control_plane.h"
#include "elastic/fault_spec.h"

namespace rf::ddp {

// loss(output, labels) -> a 1-element tensor: the SUM over the samples (never the mean:
// the reducer divides by the global count).
using LossFn = std::function<Tensor(const Tensor& output, std::span<const int32_t> labels)>;

// How a fault-tolerant trainer meets its coordinator, its peers and its faults. Left empty:
// as `ringfence run` says through the environment (elastic::Client, comm::make_communicator,
// RINGFENCE_INJECT, kill and stop by signal). A test fills them to run W trainers as threads
// of one process (tests/ddp/inproc: elastic::SimControl, a loopback data plane).
struct TrainerSeams {
  std::shared_ptr<elastic::ControlPlane> control;  // made, not joined; null: the environment's
  int64_t incarnation = 0;                         // with control: this worker's (its slot is control's)
  std::vector<elastic::FaultSpec> faults;          // with control: instead of RINGFENCE_INJECT
  // Each generation's communicator; empty: comm::make_communicator(backend, options).
  std::function<std::shared_ptr<comm::Communicator>(const comm::CommOptions&)> communicators;
  // What kill, stop, exit and hang do (FaultInjector::set_process_fault); empty: to this process.
  std::function<void(const elastic::FaultSpec&)> process_fault;
};

struct TrainerConfig {
  // false: plain data-parallel training for comparison (the failure-free overhead of all
  // of this): no coordinator, no heartbeats, no recovery — ranks from comm's local
  // launcher (RF_RANK, RF_WORLD, RF_STORE: a FileStore), or with none of the three set one
  // rank alone (a program run by hand), and any failure is fatal. A program that runs
  // both ways sets it to launched_by_ringfence().
  // With it off, `resume` and `resume_from` need one rank (InvalidInput otherwise: ranks
  // without a coordinator could not agree on the checkpoint).
  bool fault_tolerance = true;
  std::string model_name = "model";  // recorded in state images; a receiver checks it
  // The communicators' backend. Their device is the model's: every parameter on one device
  // (the reducer checks), on a GPU the communicator is bound to it (NCCL) or stages its
  // buckets through pinned host memory (UCX); each batch is copied there before forward.
  comm::Backend backend = comm::Backend::Ucx;
  int64_t global_batch = 128;
  uint64_t seed = 0;            // batch order (R3)
  int64_t steps = 100;          // train steps 0 .. steps-1
  ReducerOptions reducer;
  // > 0: exact mode (ddp/exact_reducer.h, docs/exact.md): each step's global batch is cut
  // into this many micro-shards, computed one by one and summed exactly, so the state has
  // the same bits for any W and any membership history. 0: the float sum (bitwise equal
  // for the same W). Recorded in checkpoints; resuming across the two is refused.
  int micro_shards = 0;
  // > 0: paired A/B of the overlap in one job — overlap on for k steps, off for k, ...
  // (overlap_ab_on(step, k), reducer.h), the same switch step on every rank; the weights
  // are bitwise those of a run with overlap always on or always off. 0: reducer.overlap.
  int64_t overlap_ab_period = 0;
  int64_t verify_every = 0;     // > 0: digests compared every N steps (stop on divergence)
  std::string audit_log;        // JSON lines of every state change ("" = none)
  int64_t log_interval = 0;     // rank 0 logs step, W, loss, samples/s (base/log.h, "worker")
  // D3: how long the training thread may go without progress, learned from this worker's
  // step times within [floor, ceiling] (ddp/stall_bound.h). Its heartbeats carry what the
  // training thread does and this bound: the coordinator evicts a member computing past
  // it (hung: user code blocked, a deadlock) or waiting inside one collective past two of
  // them (wedged), and the launcher replaces it; the communicator's own stall timeout is
  // 1.5 bounds. ceiling is also the fixed stall timeout without fault tolerance; no bound
  // exceeds it.
  StallBoundOptions stall;
  std::chrono::milliseconds connect_timeout{30000};
  // Called on the training thread after every applied step (step, global mean loss):
  // metrics, progress, or a test that corrupts a replica to prove --verify-every works.
  std::function<void(int64_t step, double loss)> on_step;
  // Disk checkpoints (docs/protocol.md "Whole-job failure"): rank 0 of the generation writes
  // ckpt_dir/ckpt-<step>.safetensors in the background every ckpt_every steps, when the
  // control block asks for one (R5), at a graceful stop and at the end; each records the
  // coordinator's job id. When every worker died and the launcher restarted them, the plan
  // says whole_job_restart: each restores this job's newest valid checkpoint and the next
  // round plans from it (no flag needed). With `resume`, the worker first restores the
  // newest valid checkpoint (any job's) and reports that state, so a job run again after
  // its launcher died too continues at its step + 1. Without `resume`, the job's first
  // fresh start into a ckpt_dir that already holds checkpoints throws InvalidInput before
  // any step (they are another run's; docs/ddp.md); under the launcher the worker first
  // reports it to the coordinator as fatal, which stops the job with it (no restarts).
  // One rank without fault tolerance takes the directory's lock at its start and restores
  // with `resume` before its first step; its periodic checkpoints wait for a busy writer
  // instead of being deferred (ddp/checkpointing.h).
  std::string ckpt_dir;
  int64_t ckpt_every = 0;
  int64_t ckpt_keep = 3;
  std::string ckpt_staging = "/var/tmp";  // the final checkpoint's staging (ckpt/staging.h)
  bool resume = false;
  // Recorded in every checkpoint (the reference programs: models/train_setup.h
  // checkpoint_meta): the optimizer's hyper-parameters, a JSON object, and the data order
  // ("": none).
  std::string ckpt_optimizer_hparams = "{}";
  std::string ckpt_data_order = "";
  // Without fault tolerance, one rank: continue from this checkpoint file instead of the
  // newest in ckpt_dir (any problem with it is an error; ckpt_dir may then hold no newer
  // checkpoint). "": none.
  std::string resume_from;
  // Called on the training thread after the state was restored from a disk checkpoint
  // (resume, resume_from, a whole-job restart), with its step and file.
  std::function<void(int64_t step, const std::string& path)> on_restore;
  // Tests: handed to the checkpoint writer (ckpt/checkpoint_dir.h, called as it writes).
  ckpt::PartialWriteHook ckpt_partial_write_hook;
  // comm's flight recorder dumps here when a generation's communicator fails. "" under
  // `ringfence run`: RINGFENCE_RUN_DIR/flight-slotS-incI.jsonl; "" without a launcher: stderr.
  std::string flight_recorder;
  // Spans of every step and recovery phase in Chrome trace format (base/trace.h,
  // docs/trace.md). "" = RINGFENCE_TRACE, which `ringfence run --trace` sets; unset: none.
  std::string trace;
  // Without fault tolerance (a program run by hand): when this becomes true (a signal
  // handler), training stops after the step in flight and the final checkpoint is written,
  // as R5's stop does under ringfence run (where the launcher owns the stop). Null: never.
  const std::atomic<bool>* stop_requested = nullptr;
  // Without fault tolerance, one rank, not exact mode: the program's own step replaces
  // forward, the all-reduce and the optimizer's update (models/graph_step.h: the step as a
  // CUDA graph). Given the batch (host memory) and its labels, it zeroes the gradients,
  // computes the loss SUM and backward, divides the gradients by the batch's size, applies
  // the optimizer and returns the loss sum (one value on the model's device): the
  // trainer's own arithmetic at W = 1, so the same bits. Null: the trainer's step.
  std::function<Tensor(const Tensor& x, std::span<const int32_t> labels)> local_step;
  std::chrono::milliseconds plan_timeout{120000};
  std::chrono::milliseconds ready_timeout{60000};
  TrainerSeams seams;
};

struct TrainerResult {
  int64_t step = -1;            // last applied step
  std::string digest;           // TrainState digest of the final state
  double final_loss = 0.0;      // global mean loss of the last step this worker applied
  int64_t recoveries = 0;       // generations joined after the first
  uint64_t generation = 0;
  int world = 0;
  bool standby = false;         // a spare that was never needed
  double train_seconds = 0.0;
  int64_t resumed_step = -1;    // the disk checkpoint restored (resume, resume_from; -1: none)
  int64_t checkpoints = 0;      // disk checkpoints this worker saved (as rank 0)
  int64_t checkpoints_failed = 0;  // of them, not written (warnings; ddp/checkpointing.h)
  double ckpt_wait_seconds = 0.0;  // training time spent waiting for the checkpoint writer
};

// Thrown when replicas that must be equal are not (verify-every, recovery step 7): the
// job must stop, never continue on diverged state.
class DivergenceError : public Error {
 public:
  using Error::Error;
};

// Where the trainer stands, and what the coordinator asked for as this worker last heard it
// (heartbeat replies). For the training thread (e.g. inside on_step): a program can hold a
// step until a flag arrives, or prepare for a graceful stop before it lands (R5).
struct TrainerProgress {
  uint64_t generation = 0;
  int rank = 0;
  int world = 0;
  int64_t step = -1;               // last applied step
  bool stop_requested = false;     // graceful stop asked for: the next step carries it (R5)
  bool reconfigure_requested = false;  // a joiner waits: the next step carries it (R5)
  int64_t checkpoints_failed = 0;  // disk checkpoints this worker could not write
};

// True when `ringfence run` started this process (RINGFENCE_COORD or, with coordinator
// replicas, RINGFENCE_ETCD is set): fault tolerance has a job to join.
bool launched_by_ringfence();

class Trainer {
 public:
  Trainer(nn::Module& model, LossFn loss, const data::Dataset& dataset, optim::Optimizer& optimizer,
          TrainerConfig config);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;
  // Runs until the last step, a graceful stop, or an unrecoverable error (elastic's
  // JobStopped, DivergenceError, ...). Reads RINGFENCE_COORD (or _ETCD and _JOB)/_TOKEN/_SLOT/_INCARNATION and
  // RINGFENCE_INJECT (with fault_tolerance off: RF_RANK/RF_WORLD/RF_STORE).
  TrainerResult run();
  // Only from the training thread (on_step) or when run() is not running.
  TrainerProgress progress() const;
  // Where the last applied step's time went in the reducer (overlap, exposed wait); same
  // threading rule as progress().
  const StepTimeline& last_step_timeline() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rf::ddp
