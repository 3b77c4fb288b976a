#include "core/data/idx.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

#include "base/str.h"
#include "core/data/data_error.h"

namespace rf::data {
namespace {

// An upper bound on what we will allocate for one file (16 GiB): a corrupt dimension must
// give an error, not an out-of-memory kill.
constexpr int64_t kMaxIdxBytes = int64_t{1} << 34;

// Owns a zlib file handle; gzread passes uncompressed files through unchanged, so one path
// reads both .gz and plain IDX files.
class GzFile {
 public:
  explicit GzFile(const std::string& path) : path_(path) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) throw DataError(rf::str(path, ": file not found"));
    if (std::filesystem::is_directory(path, ec)) throw DataError(rf::str(path, ": is a directory, expected an IDX file"));
    f_ = gzopen(path.c_str(), "rb");
    if (!f_) throw DataError(rf::str(path, ": cannot open: ", std::strerror(errno)));
    gzbuffer(f_, 1 << 18);
  }
  ~GzFile() {
    if (f_) gzclose(f_);
  }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;

  // Reads up to `len` bytes; returns how many were read (fewer only at the end of the
  // stream). A damaged or cut-short gzip stream throws.
  size_t read_some(void* dst, size_t len) {
    size_t done = 0;
    auto* p = static_cast<unsigned char*>(dst);
    while (done < len) {
      unsigned chunk = static_cast<unsigned>(std::min<size_t>(len - done, 1u << 30));
      int got = gzread(f_, p + done, chunk);
      if (got < 0) throw_stream_error();
      if (got == 0) break;
      done += static_cast<size_t>(got);
    }
    if (done < len) {
      // gzread reports a cut-short compressed stream as end-of-data; gzerror says which.
      int err = Z_OK;
      gzerror(f_, &err);
      if (err != Z_OK && err != Z_STREAM_END) throw_stream_error();
    }
    offset_ += done;
    return done;
  }

  // Reads exactly `len` bytes of the named field or throws a "truncated" error.
  void read_exact(void* dst, size_t len, const char* what) {
    const uint64_t at = offset_;
    size_t got = read_some(dst, len);
    if (got != len) {
      throw DataError(rf::str(path_, ": truncated: ", what, " needs ", len, " bytes at byte offset ", at,
                              " but the file ends after ", got));
    }
  }

  uint64_t offset() const { return offset_; }

 private:
  [[noreturn]] void throw_stream_error() {
    int err = Z_OK;
    const char* msg = gzerror(f_, &err);
    // How far decompression got: zlib's position, not offset_, which still points at the
    // start of the field being read (a file cut in the data said "after 16 bytes").
    const z_off_t pos = gztell(f_);
    const uint64_t got = pos >= 0 ? static_cast<uint64_t>(pos) : offset_;
    if (err == Z_BUF_ERROR) {
      throw DataError(rf::str(path_, ": truncated: the gzip stream ends early (after ", got,
                              " decompressed bytes)"));
    }
    throw DataError(rf::str(path_, ": corrupt gzip data after ", got, " decompressed bytes: ",
                            msg ? msg : "unknown zlib error"));
  }

  std::string path_;
  gzFile f_ = nullptr;
  uint64_t offset_ = 0;
};

}  // namespace

IdxArray read_idx_u8(const std::string& path, int expected_ndims) {
  GzFile f(path);
  unsigned char magic[4];
  f.read_exact(magic, 4, "the magic number");
  if (magic[0] != 0 || magic[1] != 0) {
    throw DataError(rf::str(path, ": bad magic number: bytes 0-1 are 0x", std::hex, int{magic[0]}, " 0x",
                            int{magic[1]}, ", expected 0x00 0x00 (not an IDX file, or not decompressed)"));
  }
  if (magic[2] != 0x08) {
    throw DataError(rf::str(path, ": unsupported data type 0x", std::hex, int{magic[2]},
                            " at byte offset 2, expected 0x08 (unsigned byte)"));
  }
  if (magic[3] != expected_ndims) {
    throw DataError(rf::str(path, ": wrong number of dimensions ", int{magic[3]}, " at byte offset 3, expected ",
                            expected_ndims));
  }
  IdxArray out;
  int64_t total = 1;
  for (int d = 0; d < expected_ndims; ++d) {
    unsigned char b[4];
    const uint64_t at = f.offset();
    f.read_exact(b, 4, "a dimension");
    const uint32_t dim = (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
    if (dim == 0) throw DataError(rf::str(path, ": dimension ", d, " (byte offset ", at, ") is 0"));
    if (total > kMaxIdxBytes / dim) {
      throw DataError(rf::str(path, ": dimensions too large (dimension ", d, " = ", dim, " at byte offset ", at,
                              " makes more than ", kMaxIdxBytes, " bytes)"));
    }
    total *= dim;
    out.dims.push_back(dim);
  }
  // Sized once from the header: the buffer is faulted in exactly once and never regrown.
  out.data.resize(static_cast<size_t>(total));
  f.read_exact(out.data.data(), out.data.size(), "the data");
  unsigned char extra;
  if (f.read_some(&extra, 1) != 0) {
    throw DataError(rf::str(path, ": unexpected trailing bytes after the data at byte offset ", f.offset() - 1,
                            " (the dimensions say the file has ", f.offset() - 1, " bytes)"));
  }
  return out;
}

}  // namespace rf::data
