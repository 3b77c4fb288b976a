#include "ckpt/async_checkpointer.h"

#include <sys/resource.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/str.h"

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
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

void AsyncCheckpointer::save(const nn::Module& model, const optim::Optimizer& optimizer, const SnapshotMeta& meta) {
  std::unique_lock<std::mutex> lk(mu_);
  if (pending_) {
    const TimePoint t0 = Clock::now();
    wait_idle(lk);
    wait_seconds_ += seconds_since(t0);
  } else {
    wait_idle(lk);  // only rethrows an earlier failure
  }
  // The writer only reads copy_ while pending_, and it is not: capture is safe.
  copy_.capture(model, optimizer, meta);
  pending_ = true;
  ++saves_;
  lk.unlock();
  cv_.notify_all();
}

void AsyncCheckpointer::flush() {
  std::unique_lock<std::mutex> lk(mu_);
  wait_idle(lk);
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

void AsyncCheckpointer::run() {
  // Best effort: a failure (e.g. not permitted) leaves the thread at the normal priority.
  if (opt_.writer_nice != 0) (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), opt_.writer_nice);
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return pending_ || stop_; });
    if (!pending_) return;  // stop_ with nothing left to write
    lk.unlock();
    // copy_ is ours until pending_ is cleared: save() waits for that before capturing.
    std::exception_ptr err;
    std::string note;
    int64_t step = copy_.meta().step;
    try {
      copy_.serialize(image_);
      const std::string path = write_checkpoint_file(opt_.dir, step, image_, opt_.partial_write_hook);
      const auto removed = prune_checkpoints(opt_.dir, opt_.keep, step);
      note = rf::str("ckpt: wrote ", path, " (", image_.size(), " bytes)\n");
      for (const auto& r : removed) note += rf::str("ckpt: removed ", r, "\n");
    } catch (...) {
      err = std::current_exception();
    }
    lk.lock();
    if (err) error_ = err;
    else last_written_ = step;
    notes_ += note;
    pending_ = false;
    cv_.notify_all();
  }
}

}  // namespace rf::ckpt
