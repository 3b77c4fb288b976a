#include "ckpt/async_checkpointer.h"

#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>

#include "base/clock.h"
#include "base/error.h"
#include "base/str.h"
#include "ckpt/staging.h"

namespace rf::ckpt {

AsyncCheckpointer::AsyncCheckpointer(CheckpointerOptions options, std::ostream* log)
    : opt_(std::move(options)), log_(log), lock_(opt_.dir) {
  if (opt_.keep < 1) throw rf::InvalidInput(rf::str("--ckpt-keep: ", opt_.keep, " is below the minimum 1"));
  // With the lock held no live writer can own a temp file: these are a killed one's.
  for (const auto& p : remove_stale_temps(opt_.dir))  // (no thread yet: log_ is ours)
    if (log_) *log_ << "ckpt: removed " << p << " (left by an interrupted write)\n";
  thread_ = std::thread([this] { run(); });
}

AsyncCheckpointer::~AsyncCheckpointer() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;  // the writer finishes a pending write before it looks at stop_
  }
  cv_.notify_all();
  thread_.join();
}

void AsyncCheckpointer::print_notes(std::unique_lock<std::mutex>& lk) {
  std::string notes;
  notes.swap(notes_);
  lk.unlock();
  if (log_ && !notes.empty()) *log_ << notes << std::flush;
  lk.lock();
}

void AsyncCheckpointer::wait_idle(std::unique_lock<std::mutex>& lk) {
  cv_.wait(lk, [&] { return !pending_; });
  print_notes(lk);
}

std::string AsyncCheckpointer::where_valid() const {
  return newest_path_.empty() ? rf::str("no valid checkpoint in ", opt_.dir)
                              : rf::str("the newest valid checkpoint is ", newest_path_, " (step ", newest_step_, ")");
}

void AsyncCheckpointer::save(const nn::Module& model, const optim::Optimizer& optimizer, const SnapshotMeta& meta,
                             const StorageFault& fault, SaveKind kind) {
  std::unique_lock<std::mutex> lk(mu_);
  if (pending_) {
    const TimePoint t0 = Clock::now();
    wait_idle(lk);
    wait_seconds_ += seconds_since(t0);
  } else {
    print_notes(lk);
  }
  // The writer only reads copy_ while pending_, and it is not: capture is safe.
  copy_.capture(model, optimizer, meta);
  fault_ = fault;
  kind_ = kind;
  pending_ = true;
  ++saves_;
  lk.unlock();
  cv_.notify_all();
}

void AsyncCheckpointer::flush() {
  std::unique_lock<std::mutex> lk(mu_);
  wait_idle(lk);
  if (failed_step_ >= 0)
    throw CheckpointWriteFailed(
        rf::str("the checkpoint of step ", failed_step_, " could not be written (", last_error_, "); ", where_valid()));
}

void AsyncCheckpointer::report() {
  std::unique_lock<std::mutex> lk(mu_, std::try_to_lock);  // the writer holds it only briefly
  if (lk.owns_lock() && !notes_.empty()) print_notes(lk);
}

bool AsyncCheckpointer::writing() const {
  std::lock_guard<std::mutex> lk(mu_);
  return pending_;
}

int64_t AsyncCheckpointer::last_written_step() const {
  std::lock_guard<std::mutex> lk(mu_);
  return last_written_;
}

std::string AsyncCheckpointer::newest_valid() const {
  std::lock_guard<std::mutex> lk(mu_);
  return newest_path_;
}

void AsyncCheckpointer::set_newest_valid(int64_t step, const std::string& path) {
  std::lock_guard<std::mutex> lk(mu_);
  newest_step_ = step;
  newest_path_ = path;
}

int64_t AsyncCheckpointer::failures() const {
  std::lock_guard<std::mutex> lk(mu_);
  return failures_;
}

std::string AsyncCheckpointer::last_error() const {
  std::lock_guard<std::mutex> lk(mu_);
  return last_error_;
}

// The writer thread, mu_ not held. Out of space with a durable checkpoint of this
// directory known (newest_durable), the older ones go and the write is tried once more
// (with the same fault: an injected full disk stays full). Out of space with nothing to
// remove, the final checkpoint is staged (ckpt/staging.h) when that would make it fit.
std::string AsyncCheckpointer::write(int64_t step, const StorageFault& fault, SaveKind kind, int64_t newest_durable,
                                     std::string& note) {
  try {
    return write_checkpoint_file(opt_.dir, step, image_, opt_.partial_write_hook, fault);
  } catch (const StorageError& e) {
    const auto victims = room_to_make(e.err(), newest_durable, list_checkpoints(opt_.dir));
    if (victims.empty()) {
      if (kind != SaveKind::Final || opt_.staging_dir.empty()) throw;
      const StagingPlan plan = plan_staging(staging_input(opt_.dir, e.err(), step, image_.size(), fault));
      if (plan.verdict != StagingVerdict::Stage) throw;
      try {
        return write_staged(opt_.dir, opt_.staging_dir, step, image_, plan, fault, opt_.partial_write_hook, note);
      } catch (const StorageError& staging) {  // nothing in the directory was touched
        throw rf::Error(rf::str(e.what(), "; ", staging.what()));
      }
    }
    for (const auto& v : victims) {
      std::error_code ec;
      if (std::filesystem::remove(v.path, ec))
        note += rf::str("ckpt: removed ", v.path, " to make room (", e.what(), "; step ", newest_durable, " stays)\n");
    }
    return write_checkpoint_file(opt_.dir, step, image_, opt_.partial_write_hook, fault);
  }
}

void AsyncCheckpointer::run() {
  // Best effort: a failure (e.g. not permitted) leaves the thread at the normal priority.
  if (opt_.writer_nice != 0) (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), opt_.writer_nice);
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return pending_ || stop_; });
    if (!pending_) return;  // stop_ with nothing left to write
    const StorageFault fault = fault_;
    const SaveKind kind = kind_;
    const int64_t newest_durable = newest_step_;
    lk.unlock();
    // copy_ is ours until pending_ is cleared: save() waits for that before capturing.
    std::string note, error, path, staged;
    const int64_t step = copy_.meta().step;
    try {
      copy_.serialize(image_);
      path = write(step, fault, kind, newest_durable, note);
      note += rf::str("ckpt: wrote ", path, " (", image_.size(), " bytes)\n");
    } catch (const StagedOnly& e) {
      error = e.what();
      staged = e.staged_path();
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (error.empty()) {
      // Only now, with the new file durable, may older ones go (never the newest valid).
      try {
        for (const auto& r : prune_checkpoints(opt_.dir, opt_.keep, step)) note += rf::str("ckpt: removed ", r, "\n");
      } catch (const std::exception& e) {
        note += rf::str("ckpt: warning: pruning after step ", step, ": ", e.what(), "\n");
      }
    }
    lk.lock();
    if (error.empty()) {
      last_written_ = newest_step_ = step;
      newest_path_ = path;
      failed_step_ = -1;
    } else {
      ++failures_;
      failed_step_ = step;
      if (!staged.empty()) {  // the older ones went: the staged copy is the newest valid one
        newest_step_ = step;
        newest_path_ = staged;
      }
      last_error_ = error;
      // (Whether training goes on is the caller's: a periodic one's failure is a warning,
      // the final one's an error that flush() reports.)
      note += rf::str("ckpt: warning: step ", step, " not checkpointed: ", error, "; ", where_valid(), "\n");
    }
    notes_ += note;
    pending_ = false;
    cv_.notify_all();
  }
}

}  // namespace rf::ckpt
