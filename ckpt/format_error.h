#pragma once
// FormatError — a snapshot file (or byte image) is not a valid safetensors file, or does
// not carry what we need. what() reads "<source>: tensor '<name>': <problem>" so a log
// line names the file, the tensor and what is wrong; the parts are also kept separately
// so resume logic can report and skip a bad file.
#include <string>

#include "base/error.h"

namespace rf::ckpt {

class FormatError : public rf::InvalidInput {
 public:
  FormatError(std::string source, std::string tensor, std::string problem);
  const std::string& source() const { return source_; }
  const std::string& tensor() const { return tensor_; }  // empty when not about one tensor
  const std::string& problem() const { return problem_; }

 private:
  std::string source_, tensor_, problem_;
};

// The file could not be read at all (open, stat or read failed: an I/O error, a
// permission, a storage gone away), as opposed to read and found bad. resume_newest skips
// it but never starts fresh over it: its bytes may be intact.
class UnreadableError : public FormatError {
 public:
  using FormatError::FormatError;
};

// A tensor's bytes do not match the CRC32C recorded when it was written (or the whole
// state does not match its digest): the file is damaged.
class ChecksumError : public FormatError {
 public:
  using FormatError::FormatError;
};

// The file is valid but its names, shapes or dtypes are not what the model expects.
class MismatchError : public FormatError {
 public:
  using FormatError::FormatError;
};

// restore_state: the image is intact (every checksum holds) but is the state of another
// model or optimizer — another model or optimizer name in its metadata, or other tensor
// names, shapes or dtypes. It is valid work of another run, so resume_newest refuses a
// directory holding one instead of skipping it (this run would then overwrite and prune
// it). A snapshot of another step is a plain MismatchError.
class ForeignStateError : public MismatchError {
 public:
  using MismatchError::MismatchError;
};

// The file's digests are of another version than this build's (base/digest.h), or carry
// none: it may be intact, but it cannot be checked, and digests of two versions are never
// compared. Every older file of the same run is of that version too, so resume_newest
// stops on one instead of skipping it.
class DigestVersionMismatch : public FormatError {
 public:
  using FormatError::FormatError;
};

// Throws DigestVersionMismatch naming `source` and the metadata `key` unless `digest` is
// of this build's version.
void require_digest_version(const std::string& source, const char* key, const std::string& digest);
// rf::same_digest for digests of `source`: DigestVersionMismatch across versions.
bool same_digest(const std::string& source, const std::string& a, const std::string& b, const std::string& what);

}  // namespace rf::ckpt
