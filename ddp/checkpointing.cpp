#include "ddp/checkpointing.h"

#include <iostream>
#include <sstream>

#include "base/error.h"
#include "base/log.h"
#include "base/str.h"
#include "ckpt/checkpoint_dir.h"
#include "ckpt/resume.h"
#include "ddp/checkpoint_policy.h"

namespace rf::ddp {

namespace {
void log_warnings(const std::string& lines) {
  std::string line;
  for (std::istringstream in(lines); std::getline(in, line);) log::warn("ckpt", line);
}

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
  double wait_seconds() const override { return w_.wait_seconds(); }

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

void Checkpointing::one_rank_alone() {
  wait_for_writer_ = true;
  if (!opt_.dir.empty() && !writer_) writer_ = new_writer();
}

std::unique_ptr<CheckpointWriter> Checkpointing::new_writer() const {
  auto w = make_writer_(ckpt::CheckpointerOptions{.dir = opt_.dir, .keep = opt_.keep, .staging_dir = opt_.staging_dir,
                                                  .partial_write_hook = opt_.partial_write_hook});
  if (resumed_step_ >= 0 && !from_file_) w->set_newest_valid(resumed_step_, resumed_path_);
  return w;
}

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
  const bool busy = !wait_for_writer_ && writer_ && writer_->writing();  // one rank alone waits for it instead
  const CheckpointAction act = checkpoint_action(
      {.step = state_.step(), .every = opt_.every, .forced = forced, .deferred = deferred_, .writer_busy = busy});
  deferred_ = act == CheckpointAction::Defer;
  if (act != CheckpointAction::Save) return;
  if (!writer_) writer_ = new_writer();
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
  ++saves_;
}

// A fresh start (nobody holds state: the job's first generation) without `resume` into a
// directory that already holds checkpoints: they are another run's, and this job's rank 0
// would replace them (same names) and prune the rest: refused by every worker (and by one
// rank without fault tolerance), before any step and before connecting.
// Every worker sees the same plan and checks its own directory (any of them may be rank 0
// later). A replacement never gets here: it joins a job whose members hold state, so its
// plan is no fresh start, and with `resume` the files are this lineage's.
// (A job whose every worker died is no first generation: see restore_own.)
void Checkpointing::refuse_foreign() const {
  if (opt_.resume || opt_.dir.empty()) return;
  const auto existing = ckpt::list_checkpoints(opt_.dir);
  if (existing.empty()) return;
  // Continuing from a named file: the directory's older checkpoints are this lineage's
  // past (pruned as it goes); a newer one may be valid work of another run.
  if (from_file_ && existing.front().step <= resumed_step_) return;
  throw InvalidInput(str("--ckpt-dir ", opt_.dir, " already holds checkpoints (newest ", existing.front().path, ")",
                         from_file_ ? str(" newer than the one resumed (step ", resumed_step_, ")")
                                    : std::string(" and this job starts fresh"),
                         "; pass --resume to continue from them, or choose another directory"));
}

bool Checkpointing::restore_newest(const std::string& job_id, uint64_t generation) {
  ckpt::RestoreExpect expect;
  expect.model = opt_.model_name;
  expect.optimizer = optimizer_.kind();
  expect.job_id = job_id;
  expect.gradient_sum = opt_.gradient_sum;
  std::ostringstream warn;  // the skipped files and why, one logged line each
  std::optional<ckpt::ResumePoint> point;
  try {
    point = ckpt::resume_newest(opt_.dir, model_, optimizer_, expect, warn);
  } catch (...) {
    log_warnings(warn.str());
    throw;
  }
  log_warnings(warn.str());
  if (!point) return false;
  from_file_ = false;
  restored(*point, generation);
  return true;
}

void Checkpointing::restore_file(const std::string& path, uint64_t generation) {
  const ckpt::RestoreExpect expect{.model = opt_.model_name, .optimizer = optimizer_.kind(),
                                   .gradient_sum = opt_.gradient_sum};
  const ckpt::ResumePoint point = ckpt::resume_from_file(path, model_, optimizer_, expect);
  from_file_ = true;
  restored(point, generation);
}

// S is the checkpoint's now: its step is never saved again (it is on disk), and its file
// is the newest valid one until a write succeeds.
void Checkpointing::restored(const ckpt::ResumePoint& point, uint64_t generation) {
  state_.set_step(point.meta.step);
  saved_step_ = point.meta.step;
  resumed_step_ = point.meta.step;
  resumed_path_ = point.path;
  if (writer_ && !from_file_) writer_->set_newest_valid(resumed_step_, resumed_path_);
  ckpt::SnapshotMeta ours;
  ours.optimizer_hparams = opt_.optimizer_hparams;
  ours.data_order = opt_.data_order;
  for (const auto& w : ckpt::resume_differences(point, ours)) log::warn("ckpt", w);
  log::info("ckpt", "resumed from ", point.path, " (step ", point.meta.step, ")");
  if (audit_) audit_->record("resume", generation, state_.step(), state_.current_digest(), -1, 0);
  if (opt_.on_restore) opt_.on_restore(point.meta.step, point.path);
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
