#pragma once
// Checkpointing — the trainer's disk checkpoints (docs/protocol.md "Whole-job failure"): when
// rank 0 writes one (checkpoint_policy.h: periodic ones deferred while the writer is busy,
// forced ones at once, a step never twice), the refusal of another run's checkpoints at a
// fresh start, and the restores from disk (`resume`, and a whole-job restart's own newest).
// Owned by the trainer; the writer is made when this worker first saves as rank 0 (the
// directory's writer lock is taken then: a rank 0 that died released it).
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
  // Recorded in every checkpoint (ckpt/snapshot_meta.h), as the single-process loop does.
  std::string optimizer_hparams = "{}";
  std::string data_order = "";
  std::string gradient_sum = "";  // ckpt::gradient_sum_name(micro_shards); checked on resume
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
  // directory: they are another run's.
  void refuse_foreign() const;
  // The newest valid checkpoint of this model and optimizer (and, with a job id, of that
  // job) into the model, optimizer and S. False when there is none.
  bool restore_newest(const std::string& job_id, uint64_t generation);
  // A whole-job restart: this job's newest checkpoint, if the directory holds any.
  bool restore_own(const std::string& job_id, uint64_t generation);

  int64_t saved_step() const { return saved_step_; }
  int64_t failures() const { return writer_ ? writer_->failures() : 0; }  // checkpoints not written
  std::string last_error() const { return writer_ ? writer_->last_error() : std::string(); }
  bool deferred() const { return deferred_; }
  int64_t resumed_step() const { return resumed_step_; }

 private:
  void save_if_due(const CheckpointOrigin& at, bool forced, ckpt::SaveKind kind = ckpt::SaveKind::Periodic);
  CheckpointingOptions opt_;
  nn::Module& model_;
  optim::Optimizer& optimizer_;
  TrainState& state_;
  CheckpointWriterFactory make_writer_;
  std::unique_ptr<CheckpointWriter> writer_;  // made when this worker first saves as rank 0
  AuditLog* audit_ = nullptr;
  int64_t saved_step_ = -1;    // the last step saved or restored: never saved (again)
  bool deferred_ = false;      // a periodic checkpoint waits for the writer
  int64_t resumed_step_ = -1;  // the step the last restore from disk brought back
  std::string resumed_path_;   // its file: the newest valid checkpoint until a write succeeds
  std::function<ckpt::StorageFault(int64_t)> faults_;
};

}  // namespace rf::ddp
