#pragma once
// Checkpointing — the trainer's disk checkpoints (docs/protocol.md "Whole-job failure"): when
// rank 0 writes one (checkpoint_policy.h: periodic ones deferred while the writer is busy,
// forced ones at once, a step never twice), the refusal of another run's checkpoints at a
// fresh start, and the restores from disk (`resume`, and a whole-job restart's own newest).
// Owned by the trainer; the writer is made when this worker first saves as rank 0 (the
// directory's writer lock is taken then: a rank 0 that died released it), or at the start
// for one rank alone (one_rank_alone).
//
// A periodic checkpoint that cannot be written (a full, failing or read-only disk) is a
// warning: the writer logs it, failures() counts it (the trainer's heartbeats carry it to
// the launcher's live line and summary) and training goes on. The final one not on disk
// is an error (final_save throws ckpt::CheckpointWriteFailed naming the newest valid one).
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "ckpt/async_checkpointer.h"
#include "ckpt/resume.h"
#include "core/nn/module.h"
#include "core/optim/optimizer.h"
#include "ddp/audit_log.h"
#include "ddp/train_state.h"

namespace rf::ddp {

// What Checkpointing drives: ckpt::AsyncCheckpointer in a job (make_async_writer), a fake
// in tests.
class CheckpointWriter {
 public:
  virtual ~CheckpointWriter() = default;
  virtual bool writing() const = 0;  // a saved state is not on disk yet
  virtual void save(const nn::Module& model, const optim::Optimizer& optimizer, const ckpt::SnapshotMeta& meta,
                    const ckpt::StorageFault& fault, ckpt::SaveKind kind) = 0;
  virtual void report() = 0;         // prints what finished since the last call; never waits
  // Waits until the writer is idle; ckpt::CheckpointWriteFailed when the newest saved state
  // could not be written.
  virtual void flush() = 0;
  virtual int64_t failures() const = 0;       // writes that failed
  virtual std::string last_error() const = 0;
  virtual void set_newest_valid(int64_t step, const std::string& path) = 0;  // restored from the directory
  virtual double wait_seconds() const { return 0.0; }  // training time spent waiting for it
};
using CheckpointWriterFactory = std::function<std::unique_ptr<CheckpointWriter>(const ckpt::CheckpointerOptions&)>;
// ckpt::AsyncCheckpointer logging to stderr.
std::unique_ptr<CheckpointWriter> make_async_writer(const ckpt::CheckpointerOptions& options);

struct CheckpointingOptions {
  std::string dir;            // "" = no disk checkpoints
  int64_t every = 0;          // periodic: after every `every` steps (0 = none)
  int64_t keep = 3;
  std::string staging_dir = "/var/tmp";  // the final checkpoint's staging (ckpt/staging.h)
  bool resume = false;        // the job continues from the directory's checkpoints
  std::string model_name;
  // Recorded in every checkpoint (ckpt/snapshot_meta.h): TrainerConfig's ckpt_* fields.
  std::string optimizer_hparams = "{}";
  std::string data_order = "";
  std::string gradient_sum = "";  // ckpt::gradient_sum_name(micro_shards); checked on resume
  // Called after each restore from disk with the checkpoint's step and file (may be empty).
  std::function<void(int64_t step, const std::string& path)> on_restore = {};
  // Tests: handed to the writer (ckpt/checkpoint_dir.h: called while it writes a temp file).
  ckpt::PartialWriteHook partial_write_hook = {};
};

// Where a checkpoint's metadata comes from: the membership at the step it records.
struct CheckpointOrigin {
  int rank = 0;
  int world = 1;
  uint64_t generation = 0;
  std::string job_id;
};

class Checkpointing {
 public:
  Checkpointing(CheckpointingOptions options, nn::Module& model, optim::Optimizer& optimizer, TrainState& state,
                CheckpointWriterFactory make_writer = make_async_writer);
  // Restores write a "resume" line to `audit` (may be null).
  void attach(AuditLog* audit) { audit_ = audit; }
  // One rank alone, without fault tolerance (a program run by hand), before any restore:
  // the writer is made now, so the directory's lock is taken first (two runs never share
  // it, nor read files the other prunes), and a periodic checkpoint waits for the previous
  // write instead of being deferred (no peer waits in an all-reduce meanwhile; the writer's
  // back-pressure shows in wait_seconds()), so checkpoints land exactly every `every` steps.
  void one_rank_alone();
  // The storage fault (--inject disk:..., FaultInjector::storage_fault) of the checkpoint of
  // a step, asked when it is saved.
  void set_storage_faults(std::function<ckpt::StorageFault(int64_t step)> faults) { faults_ = std::move(faults); }

  // After an applied step: rank 0 saves S when the policy says so (forced: checkpoint-now,
  // a stop, the end; Final: the stop's or the job's last step), then reports what the
  // writer finished.
  void after_step(const CheckpointOrigin& at, bool forced, ckpt::SaveKind kind = ckpt::SaveKind::Periodic);
  // The final (or the stop's) state on disk before the worker leaves: forced, then flushed.
  // As rank 0, throws ckpt::CheckpointWriteFailed when it could not be written (another
  // rank's writer, left from when it was rank 0, only warns).
  void final_save(const CheckpointOrigin& at);

  // Throws InvalidInput when a fresh start (without `resume`) finds checkpoints in the
  // directory: they are another run's. After restore_file, only those newer than its step.
  void refuse_foreign() const;
  // The newest valid checkpoint of this model and optimizer (and, with a job id, of that
  // job) into the model, optimizer and S. False when there is none.
  bool restore_newest(const std::string& job_id, uint64_t generation);
  // A whole-job restart: this job's newest checkpoint, if the directory holds any.
  bool restore_own(const std::string& job_id, uint64_t generation);
  // The checkpoint file the user named (it need not be in the directory): any problem is an
  // error (ckpt::resume_from_file), never a fresh start.
  void restore_file(const std::string& path, uint64_t generation);

  int64_t saved_step() const { return saved_step_; }
  int64_t saves() const { return saves_; }  // checkpoints handed to the writer
  int64_t failures() const { return writer_ ? writer_->failures() : 0; }  // checkpoints not written
  double wait_seconds() const { return writer_ ? writer_->wait_seconds() : 0.0; }
  std::string last_error() const { return writer_ ? writer_->last_error() : std::string(); }
  bool deferred() const { return deferred_; }
  int64_t resumed_step() const { return resumed_step_; }

 private:
  void save_if_due(const CheckpointOrigin& at, bool forced, ckpt::SaveKind kind = ckpt::SaveKind::Periodic);
  void restored(const ckpt::ResumePoint& point, uint64_t generation);
  std::unique_ptr<CheckpointWriter> new_writer() const;
  CheckpointingOptions opt_;
  nn::Module& model_;
  optim::Optimizer& optimizer_;
  TrainState& state_;
  CheckpointWriterFactory make_writer_;
  std::unique_ptr<CheckpointWriter> writer_;  // made when this worker first saves as rank 0
  AuditLog* audit_ = nullptr;
  int64_t saved_step_ = -1;    // the last step saved or restored: never saved (again)
  bool deferred_ = false;      // a periodic checkpoint waits for the writer
  bool wait_for_writer_ = false;
  int64_t resumed_step_ = -1;  // the step the last restore from disk brought back
  std::string resumed_path_;   // its file: the newest valid checkpoint until a write succeeds
  bool from_file_ = false;     // restored by restore_file: the file may lie outside the directory
  int64_t saves_ = 0;
  std::function<ckpt::StorageFault(int64_t)> faults_;
};

}  // namespace rf::ddp
