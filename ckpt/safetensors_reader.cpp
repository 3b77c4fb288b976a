#include "ckpt/safetensors_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "base/str.h"
#include "ckpt/crc32c.h"
#include "ckpt/format_error.h"

namespace rf::ckpt {
std::vector<std::byte> read_file_bytes(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    // Gone (deleted since it was listed) is no storage problem: nothing is there to read.
    if (errno == ENOENT) throw FormatError(path, "", rf::str("cannot open: ", std::strerror(errno)));
    throw UnreadableError(path, "", rf::str("cannot open: ", std::strerror(errno)));
  }
  std::vector<std::byte> out;
  try {
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw UnreadableError(path, "", rf::str("cannot stat: ", std::strerror(errno)));
    if (!S_ISREG(st.st_mode)) throw FormatError(path, "", "not a regular file");
    out.resize(static_cast<size_t>(st.st_size));
    size_t at = 0;
    while (at < out.size()) {
      const ssize_t n = ::read(fd, out.data() + at, out.size() - at);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw UnreadableError(path, "", rf::str("read failed: ", std::strerror(errno)));
      if (n == 0) throw FormatError(path, "", "file shrank while reading");
      at += static_cast<size_t>(n);
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return out;
}

SafetensorsReader SafetensorsReader::open(const std::string& path, ReadOptions opts) {
  std::vector<std::byte> bytes = read_file_bytes(path);
  const std::span<const std::byte> view(bytes);
  return SafetensorsReader(std::move(bytes), view, path, opts);
}

SafetensorsReader SafetensorsReader::from_bytes(std::vector<std::byte> bytes, std::string source, ReadOptions opts) {
  const std::span<const std::byte> view(bytes);
  return SafetensorsReader(std::move(bytes), view, std::move(source), opts);
}

SafetensorsReader SafetensorsReader::borrow(std::span<const std::byte> bytes, std::string source, ReadOptions opts) {
  return SafetensorsReader({}, bytes, std::move(source), opts);
}

// Moving a vector keeps its heap buffer, so `view` (taken before the move) stays valid.
SafetensorsReader::SafetensorsReader(std::vector<std::byte> owned, std::span<const std::byte> view,
                                     std::string source, ReadOptions opts)
    : owned_(std::move(owned)), bytes_(view), source_(std::move(source)) {
  header_ = parse_header(bytes_, source_);
  for (size_t i = 0; i < header_.tensors.size(); ++i) index_[header_.tensors[i].name] = i;
  if (opts.require_integrity && !has_integrity()) {
    throw FormatError(source_, "", rf::str("has no '", kCrcKey, "', '", kDigestKey, "' and '", kMetaCrcKey,
                                           "' metadata (not a ringfence snapshot?)"));
  }
  if (opts.verify_integrity &&
      (metadata().count(kCrcKey) || metadata().count(kDigestKey) || metadata().count(kMetaCrcKey))) {
    verify_integrity();
  }
}

bool SafetensorsReader::has_integrity() const {
  return metadata().count(kCrcKey) && metadata().count(kDigestKey) && metadata().count(kMetaCrcKey);
}

const TensorInfo* SafetensorsReader::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

const TensorInfo& SafetensorsReader::at(const std::string& name) const {
  const TensorInfo* t = find(name);
  if (!t) throw MismatchError(source_, name, "no such tensor in the file");
  return *t;
}

std::span<const std::byte> SafetensorsReader::bytes(const TensorInfo& t) const {
  return bytes_.subspan(header_.data_start + t.begin, t.nbytes());
}

void SafetensorsReader::copy_to(const std::string& name, DType dtype, std::span<const int64_t> shape, void* dst) const {
  const TensorInfo& t = at(name);
  if (t.dtype != dtype) {
    throw MismatchError(source_, name, rf::str("dtype is ", dtype_name(t.dtype), ", expected ", dtype_name(dtype)));
  }
  if (!std::equal(t.shape.begin(), t.shape.end(), shape.begin(), shape.end())) {
    throw MismatchError(source_, name, rf::str("shape is ", shape_str(t.shape), ", expected ", shape_str(shape)));
  }
  auto b = bytes(t);
  if (!b.empty()) std::memcpy(dst, b.data(), b.size());
}

std::string SafetensorsReader::state_digest() const {
  rf::StateDigest d;
  for (const auto& t : header_.tensors) {
    auto b = bytes(t);
    digest_tensor(d, t.name, t.dtype, t.shape, b.data(), b.size());
  }
  return d.hex();
}

void SafetensorsReader::verify_integrity() const {
  auto crc_it = metadata().find(kCrcKey);
  if (crc_it == metadata().end()) throw ChecksumError(source_, "", rf::str("no '", kCrcKey, "' metadata"));
  nlohmann::json crcs = nlohmann::json::parse(crc_it->second, nullptr, /*allow_exceptions=*/false);
  if (!crcs.is_object()) {
    throw FormatError(source_, "", rf::str("'", kCrcKey, "' metadata is not a JSON object of name -> crc"));
  }
  for (const auto& [name, _] : crcs.items()) {
    if (!find(name)) throw FormatError(source_, name, rf::str("has a CRC in '", kCrcKey, "' but no tensor"));
  }
  auto mcrc = metadata().find(kMetaCrcKey);
  if (mcrc == metadata().end()) throw ChecksumError(source_, "", rf::str("no '", kMetaCrcKey, "' metadata"));
  const std::string mactual = hex32(metadata_crc(metadata()));
  if (mactual != mcrc->second) {
    throw ChecksumError(source_, "", rf::str("metadata corrupted: crc32c of the metadata is ", mactual,
                                             ", the file recorded ", mcrc->second));
  }
  auto dig = metadata().find(kDigestKey);
  if (dig == metadata().end()) throw ChecksumError(source_, "", rf::str("no '", kDigestKey, "' metadata"));
  // A digest of another version cannot be recomputed here: refuse it before any pass.
  require_digest_version(source_, kDigestKey, dig->second);
  // One pass: per chunk the CRC and the digest, while it is in cache (before: a CRC pass,
  // then a digest pass over the whole image).
  constexpr size_t kChunk = size_t{256} << 10;
  rf::StateDigest d;
  for (size_t i = 0; i < header_.tensors.size(); ++i) {
    const TensorInfo& t = header_.tensors[i];
    auto it = crcs.find(t.name);
    if (it == crcs.end() || !it->is_string()) {
      throw FormatError(source_, t.name, rf::str("has no CRC string in '", kCrcKey, "'"));
    }
    auto b = bytes(t);
    digest_tensor_framing(d, t.name, t.dtype, t.shape, b.size());
    uint32_t crc = 0;
    for (size_t off = 0; off < b.size(); off += kChunk) {
      const auto chunk = b.subspan(off, std::min(kChunk, b.size() - off));
      crc = crc32c(chunk.data(), chunk.size(), crc);
      d.update(chunk);
    }
    const std::string actual = hex32(crc);
    if (actual != it->get_ref<const std::string&>()) {
      const size_t at = header_.data_start + t.begin;
      throw ChecksumError(source_, t.name, rf::str("corrupted: crc32c of its ", b.size(), " bytes (image bytes ", at,
                                                   "..", at + b.size(), ") is ", actual, ", the file recorded ",
                                                   it->get_ref<const std::string&>()));
    }
  }
  const std::string actual = d.hex();
  if (actual != dig->second) {
    throw ChecksumError(source_, "", rf::str("state digest ", actual, " does not match the recorded ", dig->second,
                                             " (names, shapes or dtypes were changed)"));
  }
}

}  // namespace rf::ckpt
