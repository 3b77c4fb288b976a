#include "ckpt/storage_error.h"

#include <cerrno>
#include <cstring>

#include "base/str.h"

namespace rf::ckpt {

const char* to_string(StorageOp op) { return name_of(kStorageOpNames, op); }

StorageError::StorageError(std::string path, StorageOp op, int err)
    : rf::Error(rf::str(path, ": ", to_string(op), " failed: ", std::strerror(err))),
      path_(std::move(path)), op_(op), err_(err) {}

StorageError::StorageError(std::string path, StorageOp op, int err, const std::string& detail)
    : rf::Error(rf::str(path, ": ", to_string(op), " ", detail, " failed: ", std::strerror(err))),
      path_(std::move(path)), op_(op), err_(err) {}

bool out_of_space(int err) { return err == ENOSPC || err == EDQUOT; }

StorageOp storage_fault_op(int err) {
  switch (err) {
    case EIO: return StorageOp::Fsync;
    case EROFS: return StorageOp::Create;
    default: return StorageOp::Write;
  }
}

}  // namespace rf::ckpt
