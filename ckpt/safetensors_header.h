#pragma once
// Parsing and validating a safetensors header (the part that the fuzz target exercises).
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "base/digest.h"
#include "ckpt/dtype.h"

namespace rf::ckpt {

// The format's own bound on the header (safetensors refuses larger ones too).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// Metadata keys the writer fills in and the reader verifies.
inline constexpr const char* kCrcKey = "crc32c";              // JSON object string: name -> 8 hex digits
inline constexpr const char* kDigestKey = "state_digest";     // rf::StateDigest::hex(): "x3:" + 32 hex digits
inline constexpr const char* kMetaCrcKey = "metadata_crc32c";  // 8 hex digits over the other metadata

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range within the data section

  uint64_t nbytes() const { return end - begin; }
  int64_t numel() const;
};

// "[512, 784]": a shape as every ckpt message prints it (one definition for the reader,
// the header parser and the expected-tensor check).
std::string shape_str(std::span<const int64_t> shape);

struct Header {
  std::vector<TensorInfo> tensors;  // in data-section order (ascending begin)
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // = 8 + header length
};

// Validates the whole image `file` (header length against the size, JSON well-formed and
// of the right types, known dtypes, shape x dtype size == byte count, offsets in range,
// non-overlapping and covering the data section exactly, no duplicate names or fields)
// and returns the header. Throws FormatError naming `source`, the tensor and the problem.
// Never reads outside `file`, whatever its content.
Header parse_header(std::span<const std::byte> file, const std::string& source);

// The state digest of a snapshot: for each tensor in data order, its name, dtype, shape
// and bytes are fed to rf::StateDigest. Writer and reader call this same function.
void digest_tensor(rf::StateDigest& d, const std::string& name, DType dtype, std::span<const int64_t> shape,
                   const void* data, size_t bytes);
// digest_tensor without the data: what it feeds before the `bytes` bytes themselves, for
// callers that then feed the data in chunks (one pass that also copies or CRCs them).
void digest_tensor_framing(rf::StateDigest& d, const std::string& name, DType dtype, std::span<const int64_t> shape,
                           size_t bytes);

// CRC32C over every metadata entry except the three integrity keys, in key order, each
// framed as key NUL value NUL: a flipped byte in "step" is caught like one in a tensor.
uint32_t metadata_crc(const std::map<std::string, std::string>& metadata);

}  // namespace rf::ckpt
