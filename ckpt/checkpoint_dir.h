#pragma once
// A checkpoint directory on disk: file names, durable atomic writes, the writer lock,
// listing and pruning. Works on byte images (no core dependency); the async writer and
// resume build on it.
//
//   DIR/ckpt-000000049.safetensors   the state after step 49 (9+ digits, so names sort
//   DIR/ckpt-000000099.safetensors   like steps and the newest is obvious)
//   DIR/.ckpt-000000149.safetensors.tmp   being written (never read; removed at start)
//   DIR/ckpt.lock                    flock()ed by the one writer of the job
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "ckpt/storage_error.h"

namespace rf::ckpt {

std::string checkpoint_name(int64_t step);  // "ckpt-000000049.safetensors"
// The step in a checkpoint file name; nullopt for any other name (temps, the lock, ...).
std::optional<int64_t> parse_checkpoint_name(std::string_view file_name);

struct CheckpointFile {
  int64_t step;
  std::string path;
};
// Every checkpoint file in dir, newest (largest step) first. A missing dir is empty.
std::vector<CheckpointFile> list_checkpoints(const std::string& dir);

// Another process (or another writer in this one) holds the directory's lock.
class CheckpointLocked : public rf::Error {
 public:
  using rf::Error::Error;
};

// One writer per job: an exclusive flock() on DIR/ckpt.lock for the lifetime of this
// object. flock, not an O_EXCL file: the kernel drops it when the holder dies (even by
// SIGKILL), so a crash never leaves the directory locked. Creates dir if needed.
class CheckpointLock {
 public:
  explicit CheckpointLock(const std::string& dir);  // throws CheckpointLocked / rf::Error
  ~CheckpointLock();
  CheckpointLock(const CheckpointLock&) = delete;
  CheckpointLock& operator=(const CheckpointLock&) = delete;

 private:
  int fd_ = -1;
};

// Test hook: called by the writing thread once half of the temp file is written and
// synced, with (temp path, bytes written, total). Lets a test kill the process inside
// the write window deterministically.
using PartialWriteHook = std::function<void(const std::string& temp_path, size_t written, size_t total)>;

// Writes image as DIR/ckpt-<step>.safetensors durably and atomically: to the temp name,
// fsync, rename over the final name, fsync the directory. A crash at any point leaves
// either the old directory or the complete new file, never a partial file under a
// checkpoint name. Returns the final path. A failed call throws StorageError (the path,
// the call, errno) after removing what this write made (the temp file; after a failed
// fsync of the directory, the renamed file too): the directory's other files are never
// touched. `fault` (tests, --inject disk:...) delays the write and fails it as a disk would.
std::string write_checkpoint_file(const std::string& dir, int64_t step, std::span<const std::byte> image,
                                  const PartialWriteHook& hook = {}, const StorageFault& fault = {});

// Removes temp files a killed writer left behind (call with the lock held). Returns them.
std::vector<std::string> remove_stale_temps(const std::string& dir);

// After writing step `newest`: removes checkpoints with a larger step (a lineage this run
// abandoned: resume skipped them as invalid) and all but the `keep` newest at or below
// it. Returns the removed paths.
std::vector<std::string> prune_checkpoints(const std::string& dir, int64_t keep, int64_t newest);

// A write of a checkpoint failed with err. When the device is out of space (out_of_space)
// and this writer made step `newest_durable` durable in this directory (it is on disk:
// `on_disk`, newest first, holds it), the older checkpoints that may go to make room: every
// one older than it. Otherwise none. Never the newest valid checkpoint: only files older
// than one known durable and valid (a write that succeeded) are candidates, so retention
// never deletes the newest valid checkpoint before a newer one is durable.
std::vector<CheckpointFile> room_to_make(int err, int64_t newest_durable, const std::vector<CheckpointFile>& on_disk);

}  // namespace rf::ckpt
