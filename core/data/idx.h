#pragma once
// The IDX file format (the MNIST family): magic 0x00 0x00 <type> <ndims>, then ndims
// big-endian uint32 dimensions, then the data. We read unsigned-byte files (type 0x08),
// gzip-compressed or not (zlib reads both).
#include <cstdint>
#include <string>
#include <vector>

namespace rf::data {

struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;  // product(dims) bytes
};

// Reads `path` and checks that it is a well-formed unsigned-byte IDX file with
// `expected_ndims` dimensions and exactly product(dims) data bytes (no more, no less).
// Throws DataError naming the file and, for malformed content, the field or byte offset
// (offsets count bytes of the decompressed stream).
IdxArray read_idx_u8(const std::string& path, int expected_ndims);

}  // namespace rf::data
