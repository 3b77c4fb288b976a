#pragma once
// Staging the final checkpoint — for a directory that holds one checkpoint and not two.
//
// Retention never deletes the newest valid checkpoint before a newer one is durable, so on
// a disk with room for one checkpoint every write after the first fails with ENOSPC. For a
// periodic checkpoint that is a warning (the replicas hold the state; the next interval
// tries again). The final one is the last chance: the writer stages it on another
// filesystem (`--ckpt-staging`, default /var/tmp), durably, so that a newer checkpoint is
// durable somewhere; then the older checkpoints in the directory may go, and the final one
// is written into the directory from memory and the staged copy removed. When the staging
// directory cannot take it either, nothing in the directory is touched and the final
// checkpoint fails as before (an error naming the newest valid one).
//
//   plan_staging  the pure decision: stage or not, which files go, and why not
//   write_staged  the shell: stage, remove, write, clean up
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/enum_names.h"
#include "ckpt/checkpoint_dir.h"
#include "ckpt/storage_error.h"

namespace rf::ckpt {

struct SizedCheckpoint {
  CheckpointFile file;
  uint64_t bytes = 0;
};

// The final checkpoint of `step` (`bytes` long) failed with `err`, and no older file could
// be removed without staging (room_to_make found none). `available`: the bytes the
// directory's filesystem has free for us (0 for an injected full disk: it stays full);
// `block`: its block size.
struct StagingInput {
  int err = 0;
  int64_t step = 0;
  uint64_t bytes = 0;
  uint64_t available = 0;
  uint64_t block = 4096;
  std::vector<SizedCheckpoint> on_disk;
};

enum class StagingVerdict {
  Stage,          // stage, remove `remove`, write into the directory
  NotOutOfSpace,  // EIO, EROFS, ...: removing files would not help
  NothingOlder,   // no older checkpoint in the directory to make room with
  TooSmall,       // even without the older ones the directory could not hold it
};
inline constexpr EnumName<StagingVerdict> kStagingVerdictNames[] = {
    {StagingVerdict::Stage, "stage"},
    {StagingVerdict::NotOutOfSpace, "not out of space"},
    {StagingVerdict::NothingOlder, "no older checkpoint to make room with"},
    {StagingVerdict::TooSmall, "the directory cannot hold it even alone"},
};
static_assert(lists_each_once(kStagingVerdictNames));
const char* to_string(StagingVerdict v);

struct StagingPlan {
  StagingVerdict verdict = StagingVerdict::NotOutOfSpace;
  std::vector<CheckpointFile> remove;  // Stage only: every checkpoint older than `step`
};

StagingPlan plan_staging(const StagingInput& in);

// The staged file could not be moved into the directory after the older checkpoints went:
// the final state is on disk only at staged_path() (what() says so).
class StagedOnly : public rf::Error {
 public:
  StagedOnly(std::string message, std::string staged_path)
      : rf::Error(std::move(message)), staged_(std::move(staged_path)) {}
  const std::string& staged_path() const { return staged_; }

 private:
  std::string staged_;
};

// Carries out a Stage plan for `image` (the final checkpoint of `step`): writes it durably
// into a fresh private directory under staging_dir, removes plan.remove from dir, writes
// it into dir (with `fault` and `hook`, as the first try had) and removes the staged copy.
// Returns the path in dir. Throws StorageError naming the staging directory when staging
// fails (nothing in dir touched), StagedOnly when the last write fails. `note` gets a line
// per step taken.
std::string write_staged(const std::string& dir, const std::string& staging_dir, int64_t step,
                         std::span<const std::byte> image, const StagingPlan& plan, const StorageFault& fault,
                         const PartialWriteHook& hook, std::string& note);

// The StagingInput of dir for a failed final write (statvfs and the checkpoint files' sizes).
StagingInput staging_input(const std::string& dir, int err, int64_t step, uint64_t bytes, const StorageFault& fault);

}  // namespace rf::ckpt
