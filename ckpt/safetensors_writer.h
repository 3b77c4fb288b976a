#pragma once
// SafetensorsWriter — collects (name, dtype, shape, data pointer) entries and metadata and
// writes one safetensors file or byte image. Entries point at the caller's memory, which
// must stay valid and unchanged until the write: nothing is copied until then.
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "ckpt/dtype.h"

namespace rf::ckpt {

class SafetensorsWriter {
 public:
  // Throws rf::InvalidInput for an empty, reserved ("__metadata__") or duplicate name or a
  // negative dimension.
  void add(std::string name, DType dtype, std::vector<int64_t> shape, const void* data);
  // Metadata values are strings, as safetensors requires. "crc32c", "state_digest" and
  // "metadata_crc32c" are filled in at write time and cannot be set by hand.
  void set_metadata(const std::string& key, std::string value);

  std::vector<std::byte> to_bytes() const;
  // The same image written into caller memory, so a buffer can be reused snapshot after
  // snapshot (fresh pages cost ~13 us each here). `out` must hold serialized_size() bytes
  // (rf::InvalidInput otherwise); returns the bytes written. One pass over the data: each
  // chunk is copied into `out`, then its CRC and the digest are taken from the copy while
  // it is in cache; the header (fixed-width checksums, so its length is known up front)
  // is written last. write_file / to_bytes produce the same bytes.
  size_t serialized_size() const;
  size_t serialize_into(std::span<std::byte> out) const;
  // Writes the file in place (no temporary name: atomic replacement is the disk
  // checkpointer's job). Throws rf::Error naming the path when the write fails.
  void write_file(const std::string& path) const;
  // The digest that will be stored (rf::StateDigest over the entries, see digest_tensor).
  std::string state_digest() const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    const void* data;
    size_t bytes;
  };
  // The CRC of each entry in file_order() and the state digest over them.
  struct Sums {
    std::vector<uint32_t> crc;
    std::string digest;
  };
  std::vector<const Entry*> file_order() const;
  Sums checksums() const;  // a pass over the entries' memory (write_file)
  // Padded so the data section starts 8-byte aligned. Without sums, fixed-width
  // placeholders stand in for the CRCs and the digest: same length, no pass over the data.
  std::string header_json(const Sums* sums) const;

  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace rf::ckpt
