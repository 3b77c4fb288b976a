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

}  // namespace rf::ckpt
