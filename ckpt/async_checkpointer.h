#pragma once
// AsyncCheckpointer — disk checkpoints that training does not wait for
// (docs/architecture.md, one step's item 5). save() runs on the training thread at a step
// boundary: it copies the state into a buffer reused from save to save (one memcpy of S)
// and returns; a background thread serializes the copy (CRCs, digest) into a second reused
// buffer and writes it with write_checkpoint_file (temp, fsync, rename, fsync dir), then
// prunes to the newest `keep`. One write is in flight at most: a save() that finds the
// previous write still running waits for it (back-pressure, reported in wait_seconds());
// writing() lets a caller that must not wait (the trainer's periodic checkpoints) defer
// instead.
//
// The constructor takes the directory's writer lock (CheckpointLocked if another writer
// holds it) and removes temp files a killed writer left. The destructor finishes the write
// in flight.
//
// A write that fails (a full, failing or read-only disk: ckpt/storage_error.h) costs the
// training nothing: the partial file is removed, the checkpoints already on disk stay, a
// warning naming the step, the error and the newest valid checkpoint is logged, failures()
// counts it, and the next save() tries again. Out of space, a writer that already made a
// checkpoint durable removes the older ones (room_to_make, never the newest valid) and
// retries once. The final checkpoint (SaveKind::Final) that still finds no room is staged
// on another filesystem first (ckpt/staging.h), so a directory with room for one
// checkpoint ends with the final one. Only flush() reports a failure, and only of the
// newest save: the state the caller is about to leave with is not on disk
// (CheckpointWriteFailed).
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/state.h"
#include "ckpt/storage_error.h"

namespace rf::ckpt {

// flush(): the newest saved state could not be written. what() names its step, the error
// and where the newest valid checkpoint is (or that there is none).
class CheckpointWriteFailed : public rf::Error {
 public:
  using rf::Error::Error;
};

// A periodic checkpoint's failure is a warning; the final one (the end of training, a
// stop) is the last chance to keep the state, and may be staged elsewhere to fit.
enum class SaveKind { Periodic, Final };

struct CheckpointerOptions {
  std::string dir;
  int64_t keep = 3;                   // checkpoints kept on disk (>= 1)
  // The writer thread's nice value (Linux: per thread). Checkpointing is background work:
  // on a busy machine it should take the CPU training leaves, not compete with it.
  int writer_nice = 10;
  // Where a final checkpoint that does not fit next to the older ones is staged
  // (ckpt/staging.h); "" : never staged.
  std::string staging_dir = "/var/tmp";
  PartialWriteHook partial_write_hook = {};  // tests only (checkpoint_dir.h)
};

class AsyncCheckpointer {
 public:
  // log (may be null) gets one line per checkpoint written or file removed, printed by
  // the training thread in save()/flush() (the writer thread never touches log).
  AsyncCheckpointer(CheckpointerOptions options, std::ostream* log);
  ~AsyncCheckpointer();
  AsyncCheckpointer(const AsyncCheckpointer&) = delete;
  AsyncCheckpointer& operator=(const AsyncCheckpointer&) = delete;

  // Copies the state now; the file DIR/ckpt-<meta.step>.safetensors appears later. `fault`
  // (--inject disk:...) strikes this write.
  void save(const nn::Module& model, const optim::Optimizer& optimizer, const SnapshotMeta& meta,
            const StorageFault& fault = {}, SaveKind kind = SaveKind::Periodic);
  // Waits until the writer is idle; throws CheckpointWriteFailed when the newest saved
  // state could not be written (earlier failures were warnings).
  void flush();
  // Prints what the writer finished since the last call (never waits; call it at every
  // step boundary so "ckpt: wrote" lines appear when the write ends, not at the next save).
  void report();

  int64_t last_written_step() const;  // -1 before the first
  // The newest checkpoint known valid in the directory: what this writer wrote last, or
  // what the caller restored from it (set_newest_valid). "" when none is known.
  std::string newest_valid() const;
  void set_newest_valid(int64_t step, const std::string& path);
  int64_t failures() const;           // writes that failed
  std::string last_error() const;     // the last failure's message ("" : none)
  bool writing() const;               // a saved state is not on disk yet: save() would wait
  int64_t saves() const { return saves_; }
  double wait_seconds() const { return wait_seconds_; }  // training time spent waiting on the writer

 private:
  void run();
  std::string write(int64_t step, const StorageFault& fault, SaveKind kind, int64_t newest_durable,
                    std::string& note);
  std::string where_valid() const;  // mu_ held
  void wait_idle(std::unique_lock<std::mutex>& lk);
  void print_notes(std::unique_lock<std::mutex>& lk);

  CheckpointerOptions opt_;
  std::ostream* log_;
  CheckpointLock lock_;
  StateCopy copy_;               // written by save() only while the writer is idle
  std::vector<std::byte> image_;  // the writer thread's, reused
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool pending_ = false, stop_ = false;
  StorageFault fault_;           // for the pending write
  SaveKind kind_ = SaveKind::Periodic;
  int64_t last_written_ = -1;
  std::string newest_path_;      // the newest valid checkpoint (newest_valid())
  int64_t newest_step_ = -1;
  int64_t failures_ = 0;
  int64_t failed_step_ = -1;     // the step of the last failed write, while no later save succeeded
  std::string last_error_;
  std::string notes_;  // log lines from the writer thread, printed by save()/flush()
  int64_t saves_ = 0;
  double wait_seconds_ = 0;
  std::thread thread_;  // last: started after everything above exists
};

}  // namespace rf::ckpt
