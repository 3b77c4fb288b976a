#include "ddp/checkpointing.h"

#include <iostream>

#include "base/error.h"
#include "base/log.h"
#include "base/str.h"
#include "ckpt/checkpoint_dir.h"
#include "ckpt/resume.h"
#include "ddp/checkpoint_policy.h"

namespace rf::ddp {

namespace {
class AsyncWriter final : public CheckpointWriter {
 public:
  explicit AsyncWriter(const ckpt::CheckpointerOptions& o) : w_(o, &std::cerr) {}
  bool writing() const override { return w_.writing(); }
  void save(const nn::Module& m, const optim::Optimizer& o, const ckpt::SnapshotMeta& meta,
            const ckpt::StorageFault& fault, ckpt::SaveKind kind) override {
    w_.save(m, o, meta, fault, kind);
  }
  void report() override { w_.report(); }
  void flush() override { w_.flush(); }
  int64_t failures() const override { return w_.failures(); }
  std::string last_error() const override { return w_.last_error(); }
  void set_newest_valid(int64_t step, const std::string& path) override { w_.set_newest_valid(step, path); }

 private:
  ckpt::AsyncCheckpointer w_;
};
}  // namespace

std::unique_ptr<CheckpointWriter> make_async_writer(const ckpt::CheckpointerOptions& options) {
  return std::make_unique<AsyncWriter>(options);
}

Checkpointing::Checkpointing(CheckpointingOptions options, nn::Module& model, optim::Optimizer& optimizer,
                             TrainState& state, CheckpointWriterFactory make_writer)
    : opt_(std::move(options)), model_(model), optimizer_(optimizer), state_(state),
      make_writer_(std::move(make_writer)) {}

void Checkpointing::after_step(const CheckpointOrigin& at, bool forced, ckpt::SaveKind kind) {
  save_if_due(at, forced, kind);
  if (writer_) writer_->report();
}

void Checkpointing::final_save(const CheckpointOrigin& at) {
  save_if_due(at, true, ckpt::SaveKind::Final);
  if (!writer_) return;
  try {
    writer_->flush();
  } catch (const ckpt::CheckpointWriteFailed& e) {
    if (at.rank != 0) return;  // its failure was a warning when it was rank 0
    // The digest of what is lost: a user can compare it with a run that kept it.
    throw ckpt::CheckpointWriteFailed(
        str("the final state (step ", state_.step(), ", state ", state_.digest(), ") is not in the checkpoint directory: ", e.what()));
  }
}

// Rank 0 alone writes (every replica holds the same S, R4); a worker that was rank 0 in an
// earlier generation keeps its writer (report and flush still drain it).
void Checkpointing::save_if_due(const CheckpointOrigin& at, bool forced, ckpt::SaveKind kind) {
  if (opt_.dir.empty() || at.rank != 0 || state_.step() < 0 || state_.step() == saved_step_) return;
  const CheckpointAction act = checkpoint_action({.step = state_.step(), .every = opt_.every, .forced = forced,
                                                  .deferred = deferred_, .writer_busy = writer_ && writer_->writing()});
  deferred_ = act == CheckpointAction::Defer;
  if (act != CheckpointAction::Save) return;
  if (!writer_) {
    writer_ = make_writer_(ckpt::CheckpointerOptions{.dir = opt_.dir, .keep = opt_.keep, .staging_dir = opt_.staging_dir});
    if (resumed_step_ >= 0) writer_->set_newest_valid(resumed_step_, resumed_path_);
  }
  ckpt::SnapshotMeta meta;
  meta.model = opt_.model_name;
  meta.step = state_.step();
  meta.generation = static_cast<int64_t>(at.generation);
  meta.world_size = at.world;
  meta.optimizer = optimizer_.kind();
  meta.optimizer_hparams = opt_.optimizer_hparams;
  meta.data_order = opt_.data_order;
  meta.gradient_sum = opt_.gradient_sum;
  meta.job_id = at.job_id;
  writer_->save(model_, optimizer_, meta, faults_ ? faults_(meta.step) : ckpt::StorageFault{}, kind);
  saved_step_ = state_.step();
}

// A fresh start (nobody holds state: the job's first generation) without `resume` into a
// directory that already holds checkpoints: they are another run's, and this job's rank 0
// would replace them (same names) and prune the rest — the one-process rule
// (models/train_loop.cpp) applied by every worker, before any step and before connecting.
// Every worker sees the same plan and checks its own directory (any of them may be rank 0
// later). A replacement never gets here: it joins a job whose members hold state, so its
// plan is no fresh start, and with `resume` the files are this lineage's.
// (A job whose every worker died is no first generation: see restore_own.)
void Checkpointing::refuse_foreign() const {
  if (opt_.resume || opt_.dir.empty()) return;
  const auto existing = ckpt::list_checkpoints(opt_.dir);
  if (existing.empty()) return;
  throw InvalidInput(str("--ckpt-dir ", opt_.dir, " already holds checkpoints (newest ", existing.front().path,
                         ") and this job starts fresh; pass --resume to continue from them, or choose another "
                         "directory"));
}

bool Checkpointing::restore_newest(const std::string& job_id, uint64_t generation) {
  ckpt::RestoreExpect expect;
  expect.model = opt_.model_name;
  expect.optimizer = optimizer_.kind();
  expect.job_id = job_id;
  expect.gradient_sum = opt_.gradient_sum;
  auto point = ckpt::resume_newest(opt_.dir, model_, optimizer_, expect, std::cerr);
  if (!point) return false;
  state_.set_step(point->meta.step);
  saved_step_ = point->meta.step;
  resumed_step_ = point->meta.step;
  resumed_path_ = point->path;
  if (writer_) writer_->set_newest_valid(resumed_step_, resumed_path_);
  ckpt::SnapshotMeta ours;
  ours.optimizer_hparams = opt_.optimizer_hparams;
  ours.data_order = opt_.data_order;
  for (const auto& w : ckpt::resume_differences(*point, ours)) log::warn("ckpt", w);
  log::info("ckpt", "resumed from ", point->path, " (step ", point->meta.step, ")");
  if (audit_) audit_->record("resume", generation, state_.step(), state_.current_digest(), -1, 0);
  return true;
}

// docs/protocol.md "Whole-job failure" without `resume`: the plan is a fresh start, but a
// generation of this job ran before, so every worker that held state is gone and the only
// committed state left is on disk: the newest valid checkpoint of *this job* (the job id
// every checkpoint records; a file of another job is refused, as at the first fresh start).
// False when there is nothing to restore (quietly when the directory holds no checkpoint at
// all: nothing was lost).
bool Checkpointing::restore_own(const std::string& job_id, uint64_t generation) {
  if (opt_.dir.empty() || ckpt::list_checkpoints(opt_.dir).empty()) return false;
  return restore_newest(job_id, generation);
}

}  // namespace rf::ddp
