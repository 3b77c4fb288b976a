#include "ckpt/state.h"

#include <cstring>

#include "base/enforce.h"
#include "base/str.h"
#include "ckpt/check.h"
#include "ckpt/format_error.h"
#include "ckpt/safetensors.h"
#include "core/state_digest.h"

namespace rf::ckpt {
namespace {

// One tensor of S as the image holds it, pointing at live memory (or, for counters, at
// `counters` below, which must outlive the part).
struct Part {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  void* data;
  size_t bytes;
};

std::vector<int64_t> dims(const Tensor& t) {
  std::vector<int64_t> out;
  for (int i = 0; i < t.dim(); ++i) out.push_back(t.size(i));
  return out;
}

void add_tensor(std::vector<Part>& parts, std::string name, const Tensor& t) {
  // Snapshots move host bytes; a device tensor would need staging first.
  RF_ENFORCE(t.device() == Device::CPU, "snapshot of '", name, "': only CPU tensors are supported");
  parts.push_back({std::move(name), DType::F32, dims(t), t.data(), sizeof(float) * static_cast<size_t>(t.numel())});
}

// Parameters, then optimizer buffers, then counters (the writer puts the 8-byte counters
// first in the file; the order here only fixes ties).
std::vector<Part> state_parts(const nn::Module& model, const optim::Optimizer& optimizer,
                              std::vector<int64_t>& counters) {
  std::vector<Part> parts;
  for (const auto& [name, t] : model.named_parameters()) add_tensor(parts, name, t);
  for (const auto& [name, t] : optimizer.named_buffers()) add_tensor(parts, kOptimPrefix + name, t);
  const auto named = optimizer.named_counters();
  counters.resize(named.size());  // sized before any pointer into it is taken
  for (size_t i = 0; i < named.size(); ++i) {
    counters[i] = named[i].second;
    parts.push_back({kOptimPrefix + named[i].first, DType::I64, {}, &counters[i], sizeof(int64_t)});
  }
  return parts;
}

void write_meta(SafetensorsWriter& w, const SnapshotMeta& meta, const std::string& rf_digest) {
  write_snapshot_meta(w, meta);
  w.set_metadata(kRfDigestKey, rf_digest);
}

}  // namespace

std::string state_digest_of(const nn::Module& model, const optim::Optimizer& optimizer) {
  return rf::state_digest(model, optimizer);
}

size_t snapshot_size(const nn::Module& model, const optim::Optimizer& optimizer, const SnapshotMeta& meta) {
  std::vector<int64_t> counters;
  SafetensorsWriter w;
  for (auto& p : state_parts(model, optimizer, counters)) w.add(p.name, p.dtype, p.shape, p.data);
  write_meta(w, meta, std::string(32, '0'));  // same length as the real digest
  return w.serialized_size();
}

void serialize_state(const nn::Module& model, const optim::Optimizer& optimizer, const SnapshotMeta& meta,
                     std::vector<std::byte>& out) {
  std::vector<int64_t> counters;
  SafetensorsWriter w;
  for (auto& p : state_parts(model, optimizer, counters)) w.add(p.name, p.dtype, p.shape, p.data);
  write_meta(w, meta, state_digest_of(model, optimizer));
  out.resize(w.serialized_size());  // within capacity after the first time: no new pages
  const size_t n = w.serialize_into(out);
  RF_ENFORCE(n == out.size(), "serialized ", n, " bytes, sized ", out.size());
}

SnapshotMeta restore_state(std::span<const std::byte> image, nn::Module& model, optim::Optimizer& optimizer,
                           const RestoreExpect& expect, const std::string& source) {
  // 1. The image is the staging buffer: validate all of it before touching S (R6).
  const SafetensorsReader r =
      SafetensorsReader::borrow(image, source, {.verify_integrity = true, .require_integrity = true});
  const SnapshotMeta meta = read_snapshot_meta(r);
  auto it = r.metadata().find(kRfDigestKey);
  if (it == r.metadata().end()) throw FormatError(source, "", str("metadata '", kRfDigestKey, "' is missing"));
  const std::string& rf_digest = it->second;

  if (!expect.model.empty() && meta.model != expect.model)
    throw MismatchError(source, "", str("is a snapshot of model '", meta.model, "', expected '", expect.model, "'"));
  if (!expect.optimizer.empty() && meta.optimizer != expect.optimizer)
    throw MismatchError(source, "",
                        str("holds optimizer '", meta.optimizer, "' state, expected '", expect.optimizer, "'"));
  if (expect.step && meta.step != *expect.step)
    throw MismatchError(source, "", str("is the state of step ", meta.step, ", expected step ", *expect.step));
  if (!expect.digest.empty() && rf_digest != expect.digest)
    throw ChecksumError(source, "", str("state digest is ", rf_digest, ", expected ", expect.digest));

  std::vector<int64_t> counters;
  const std::vector<Part> parts = state_parts(model, optimizer, counters);
  std::vector<ExpectedTensor> want;
  for (const auto& p : parts) want.push_back({p.name, p.dtype, p.shape});
  check_tensors(r, want);  // exact set: names, shapes, dtypes; every difference listed

  std::vector<int64_t> new_counters(counters.size());
  for (size_t i = 0, c = 0; i < parts.size(); ++i) {
    if (parts[i].dtype != DType::I64) continue;
    std::memcpy(&new_counters[c], r.bytes(r.at(parts[i].name)).data(), sizeof(int64_t));
    if (new_counters[c] < 0)
      throw FormatError(source, parts[i].name, str("counter is ", new_counters[c], ", expected >= 0"));
    ++c;
  }

  // 2. Swap in: plain copies into memory validated above; nothing here can fail.
  const auto counter_names = optimizer.named_counters();
  for (size_t i = 0, c = 0; i < parts.size(); ++i) {
    if (parts[i].dtype == DType::I64) {
      optimizer.set_counter(counter_names[c].first, new_counters[c]);
      ++c;
      continue;
    }
    auto b = r.bytes(r.at(parts[i].name));
    if (!b.empty()) std::memcpy(parts[i].data, b.data(), b.size());
  }
  return meta;
}

void StateCopy::capture(const nn::Module& model, const optim::Optimizer& optimizer, const SnapshotMeta& meta) {
  std::vector<int64_t> counters;
  const std::vector<Part> parts = state_parts(model, optimizer, counters);
  size_t total = 0;
  for (const auto& p : parts) total += p.bytes;
  data_.resize(total);  // reused capacity after the first capture
  entries_.clear();
  size_t at = 0;
  for (const auto& p : parts) {
    if (p.bytes) std::memcpy(data_.data() + at, p.data, p.bytes);
    entries_.push_back({p.name, p.dtype, p.shape, at, p.bytes});
    at += p.bytes;
  }
  meta_ = meta;
  rf_digest_ = state_digest_of(model, optimizer);
}

void StateCopy::serialize(std::vector<std::byte>& out) const {
  SafetensorsWriter w;
  for (const auto& e : entries_) w.add(e.name, e.dtype, e.shape, data_.data() + e.offset);
  write_meta(w, meta_, rf_digest_);
  out.resize(w.serialized_size());
  const size_t n = w.serialize_into(out);
  RF_ENFORCE(n == out.size(), "serialized ", n, " bytes, sized ", out.size());
}

}  // namespace rf::ckpt
