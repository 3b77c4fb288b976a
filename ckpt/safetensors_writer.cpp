#include "ckpt/safetensors_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "base/digest.h"
#include "base/enforce.h"
#include "base/error.h"
#include "base/str.h"
#include "ckpt/crc32c.h"
#include "ckpt/safetensors_header.h"

namespace rf::ckpt {
namespace {

void put_le64(std::byte* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::byte>((v >> (8 * i)) & 0xFF);
}

}  // namespace

void SafetensorsWriter::add(std::string name, DType dtype, std::vector<int64_t> shape, const void* data) {
  if (name.empty()) throw rf::InvalidInput("SafetensorsWriter: a tensor needs a non-empty name");
  if (name == "__metadata__") throw rf::InvalidInput("SafetensorsWriter: '__metadata__' is reserved, not a tensor name");
  for (const auto& e : entries_) {
    if (e.name == name) throw rf::InvalidInput(rf::str("SafetensorsWriter: tensor '", name, "' added twice"));
  }
  size_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0) throw rf::InvalidInput(rf::str("SafetensorsWriter: tensor '", name, "' has negative dimension ", d));
    numel *= static_cast<size_t>(d);
  }
  const size_t bytes = numel * dtype_size(dtype);
  if (bytes > 0 && data == nullptr) {
    throw rf::InvalidInput(rf::str("SafetensorsWriter: tensor '", name, "' has ", bytes, " bytes but no data"));
  }
  entries_.push_back(Entry{std::move(name), dtype, std::move(shape), data, bytes});
}

void SafetensorsWriter::set_metadata(const std::string& key, std::string value) {
  if (key == kCrcKey || key == kDigestKey || key == kMetaCrcKey) {
    throw rf::InvalidInput(rf::str("SafetensorsWriter: metadata '", key, "' is computed by the writer"));
  }
  metadata_[key] = std::move(value);
}

// Wider types first (stable, so otherwise in the order added): with the data section
// 8-byte aligned, every tensor then starts aligned to its element size, so readers (numpy,
// torch, mmap) can view it in place.
std::vector<const SafetensorsWriter::Entry*> SafetensorsWriter::file_order() const {
  std::vector<const Entry*> order;
  for (const auto& e : entries_) order.push_back(&e);
  std::stable_sort(order.begin(), order.end(),
                   [](const Entry* a, const Entry* b) { return dtype_size(a->dtype) > dtype_size(b->dtype); });
  return order;
}

std::string SafetensorsWriter::state_digest() const { return checksums().digest; }

SafetensorsWriter::Sums SafetensorsWriter::checksums() const {
  Sums s;
  rf::StateDigest d;
  for (const Entry* e : file_order()) {
    s.crc.push_back(crc32c(e->data, e->bytes));
    digest_tensor(d, e->name, e->dtype, e->shape, e->data, e->bytes);
  }
  s.digest = d.hex();
  return s;
}

std::string SafetensorsWriter::header_json(const Sums* sums) const {
  nlohmann::ordered_json h;
  nlohmann::ordered_json meta(nlohmann::ordered_json::value_t::object);
  for (const auto& [k, v] : metadata_) meta[k] = v;
  nlohmann::ordered_json crcs(nlohmann::ordered_json::value_t::object);
  const auto order = file_order();
  for (size_t i = 0; i < order.size(); ++i) crcs[order[i]->name] = sums ? hex32(sums->crc[i]) : "00000000";
  meta[kCrcKey] = crcs.dump();
  meta[kDigestKey] = sums ? sums->digest : std::string(rf::kDigestChars, '0');
  meta[kMetaCrcKey] = hex32(metadata_crc(metadata_));
  h["__metadata__"] = meta;
  uint64_t offset = 0;
  for (const Entry* e : order) {
    h[e->name] = {{"dtype", std::string(dtype_name(e->dtype))}, {"shape", e->shape}, {"data_offsets", {offset, offset + e->bytes}}};
    offset += e->bytes;
  }
  std::string text = h.dump();
  // Pad with spaces (valid JSON whitespace) so the data section starts 8-byte aligned.
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

size_t SafetensorsWriter::serialized_size() const {
  size_t total = 8 + header_json(nullptr).size();
  for (const auto& e : entries_) total += e.bytes;
  return total;
}

size_t SafetensorsWriter::serialize_into(std::span<std::byte> out) const {
  const size_t header_len = header_json(nullptr).size();
  size_t total = 8 + header_len;
  for (const auto& e : entries_) total += e.bytes;
  if (out.size() < total) {
    throw rf::InvalidInput(rf::str("SafetensorsWriter: buffer of ", out.size(), " bytes is too small for ", total));
  }
  // Data first, one pass: copy a chunk, then CRC and digest the copy while it is in cache
  // (three passes over memory before: CRCs, digest, copy). The digest depends only on the
  // concatenated bytes and crc32c continues across calls, so chunking changes neither.
  constexpr size_t kChunk = size_t{256} << 10;
  Sums sums;
  rf::StateDigest d;
  size_t at = 8 + header_len;
  for (const Entry* e : file_order()) {
    digest_tensor_framing(d, e->name, e->dtype, e->shape, e->bytes);  // then the data, below
    uint32_t crc = 0;
    const auto* src = static_cast<const std::byte*>(e->data);
    for (size_t off = 0; off < e->bytes; off += kChunk) {
      const size_t n = std::min(kChunk, e->bytes - off);
      std::byte* dst = out.data() + at + off;
      std::memcpy(dst, src + off, n);
      crc = crc32c(dst, n, crc);
      d.update(dst, n);
    }
    sums.crc.push_back(crc);
    at += e->bytes;
  }
  sums.digest = d.hex();
  // The checksums are fixed-width hex, so the real header is exactly as long as the
  // placeholder one the data offset was computed from.
  const std::string header = header_json(&sums);
  RF_ENFORCE(header.size() == header_len, "SafetensorsWriter: header is ", header.size(), " bytes, sized ",
             header_len);
  put_le64(out.data(), header.size());
  std::memcpy(out.data() + 8, header.data(), header.size());
  return total;
}

std::vector<std::byte> SafetensorsWriter::to_bytes() const {
  std::vector<std::byte> out(serialized_size());
  serialize_into(out);
  return out;
}

void SafetensorsWriter::write_file(const std::string& path) const {
  const Sums sums = checksums();
  const std::string header = header_json(&sums);
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw rf::Error(rf::str(path, ": cannot create: ", std::strerror(errno)));
  std::byte len[8];
  put_le64(len, header.size());
  bool ok = std::fwrite(len, 1, 8, f) == 8 && std::fwrite(header.data(), 1, header.size(), f) == header.size();
  for (const Entry* e : file_order()) {
    if (ok && e->bytes) ok = std::fwrite(e->data, 1, e->bytes, f) == e->bytes;
  }
  const int saved = errno;
  if (std::fclose(f) != 0 && ok) ok = false;
  if (!ok) throw rf::Error(rf::str(path, ": write failed: ", std::strerror(saved ? saved : errno)));
}

}  // namespace rf::ckpt
