#include "ckpt/format_error.h"

#include "base/digest.h"
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

void require_digest_version(const std::string& source, const char* key, const std::string& digest) {
  try {
    rf::require_digest_version(digest, rf::str("metadata '", key, "'"));
  } catch (const rf::DigestVersionError& e) {
    throw DigestVersionMismatch(source, "", e.what());
  }
}

bool same_digest(const std::string& source, const std::string& a, const std::string& b, const std::string& what) {
  try {
    return rf::same_digest(a, b, what);
  } catch (const rf::DigestVersionError& e) {
    throw DigestVersionMismatch(source, "", e.what());
  }
}

}  // namespace rf::ckpt
