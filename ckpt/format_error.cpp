#include "ckpt/format_error.h"

#include "base/str.h"

namespace rf::ckpt {
namespace {

std::string compose(const std::string& source, const std::string& tensor, const std::string& problem) {
  if (tensor.empty()) return rf::str(source, ": ", problem);
  return rf::str(source, ": tensor '", tensor, "': ", problem);
}

}  // namespace

FormatError::FormatError(std::string source, std::string tensor, std::string problem)
    : rf::InvalidInput(compose(source, tensor, problem)),
      source_(std::move(source)),
      tensor_(std::move(tensor)),
      problem_(std::move(problem)) {}

}  // namespace rf::ckpt
