#pragma once
// StorageError — a checkpoint file could not be written: the system call that failed, its
// errno and the path. A full disk (ENOSPC, EDQUOT), a failing one (EIO), a read-only one
// (EROFS), a failed fsync or rename: the writer removes its partial temp file, the
// directory's other checkpoints stay, and the caller decides what it costs (a periodic
// checkpoint: a warning; the final one: an error; docs/ckpt.md "When the disk fails").
//
// StorageFault is an injected one (`--inject disk:...`, ddp/fault_injector.h): the write
// waits `delay`, then, with err != 0, fails at the call a real disk fails with that errno
// (storage_fault_op), after the same partial write.
#include <chrono>
#include <string>

#include "base/enum_names.h"
#include "base/error.h"

namespace rf::ckpt {

enum class StorageOp { Create, Write, Fsync, Close, Rename, SyncDir };
inline constexpr EnumName<StorageOp> kStorageOpNames[] = {
    {StorageOp::Create, "create"}, {StorageOp::Write, "write"},   {StorageOp::Fsync, "fsync"},
    {StorageOp::Close, "close"},   {StorageOp::Rename, "rename"}, {StorageOp::SyncDir, "fsync of the directory"},
};
static_assert(lists_each_once(kStorageOpNames));
const char* to_string(StorageOp op);

class StorageError : public rf::Error {
 public:
  // what(): "<path>: <op> failed: <strerror(err)>"
  StorageError(std::string path, StorageOp op, int err);
  StorageError(std::string path, StorageOp op, int err, const std::string& detail);  // what() adds detail
  const std::string& path() const { return path_; }
  StorageOp op() const { return op_; }
  int err() const { return err_; }

 private:
  std::string path_;
  StorageOp op_;
  int err_;
};

// True for the errnos of a device out of space or of quota: freeing older checkpoints may
// let the write succeed (checkpoint_dir.h, room_to_make).
bool out_of_space(int err);

struct StorageFault {
  int err = 0;                      // 0: the write succeeds (after the delay)
  std::chrono::milliseconds delay{0};
  bool any() const { return err != 0 || delay.count() > 0; }
};

// Where a disk fails with err: ENOSPC and EDQUOT in a write (half the file written), EIO
// in the fsync (the data never reached the disk), EROFS at creation; anything else in a
// write.
StorageOp storage_fault_op(int err);

}  // namespace rf::ckpt
