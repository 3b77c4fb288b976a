#pragma once
// SafetensorsReader — owns the bytes of one safetensors file, validated on construction.
#include <cstddef>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "ckpt/dtype.h"
#include "ckpt/safetensors_header.h"

namespace rf::ckpt {

struct ReadOptions {
  // Check each tensor's CRC32C and the state digest when the file carries them.
  bool verify_integrity = true;
  // Refuse a file without them (our snapshots always have them; PyTorch-made files don't).
  bool require_integrity = false;
};

// The whole file; FormatError naming it when it cannot be opened or read.
std::vector<std::byte> read_file_bytes(const std::string& path);

class SafetensorsReader {
 public:
  static SafetensorsReader open(const std::string& path, ReadOptions opts = {});
  static SafetensorsReader from_bytes(std::vector<std::byte> bytes, std::string source, ReadOptions opts = {});
  // Validates and reads `bytes` in place, without a copy (a received state image can be
  // large): the caller keeps them alive and unchanged while the reader is used.
  static SafetensorsReader borrow(std::span<const std::byte> bytes, std::string source, ReadOptions opts = {});

  // Move-only: a copy's view would point into the original's bytes.
  SafetensorsReader(SafetensorsReader&&) = default;
  SafetensorsReader& operator=(SafetensorsReader&&) = default;
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::string& source() const { return source_; }
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }  // data order
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  bool has_integrity() const;  // carries crc32c, state_digest and metadata_crc32c

  const TensorInfo* find(const std::string& name) const;  // nullptr when absent
  const TensorInfo& at(const std::string& name) const;    // FormatError when absent
  std::span<const std::byte> bytes(const TensorInfo& t) const;

  // Copies tensor `name` to dst after checking that its dtype and shape are the expected
  // ones (MismatchError otherwise, naming both). dst needs nbytes of space.
  void copy_to(const std::string& name, DType dtype, std::span<const int64_t> shape, void* dst) const;
  void copy_to(const std::string& name, DType dtype, std::initializer_list<int64_t> shape, void* dst) const {
    copy_to(name, dtype, std::span<const int64_t>(shape.begin(), shape.size()), dst);
  }

  // Recomputes the CRC of every tensor and of the metadata, and the state digest
  // (ChecksumError on damage), in ONE pass over the data: chunk by chunk, each chunk's CRC
  // and digest while it is in cache. A tensor's CRC is compared when its last chunk is done.
  void verify_integrity() const;
  std::string state_digest() const;  // recomputed from the data (rf::StateDigest::hex())

 private:
  SafetensorsReader(std::vector<std::byte> owned, std::span<const std::byte> view, std::string source,
                    ReadOptions opts);
  std::vector<std::byte> owned_;      // empty when borrowing
  std::span<const std::byte> bytes_;  // owned_'s heap buffer (moves keep it) or the caller's
  std::string source_;
  Header header_;
  std::map<std::string, size_t> index_;
};

}  // namespace rf::ckpt
