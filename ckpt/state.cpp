#include "ckpt/state.h"

#include <cstring>
#include <thread>

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
                     std::vector<std::byte>& out, const std::string& rf_digest) {
  std::vector<int64_t> counters;
  SafetensorsWriter w;
  for (auto& p : state_parts(model, optimizer, counters)) w.add(p.name, p.dtype, p.shape, p.data);
  write_meta(w, meta, rf_digest.empty() ? state_digest_of(model, optimizer) : rf_digest);
  out.resize(w.serialized_size());  // within capacity after the first time: no new pages
  const size_t n = w.serialize_into(out);
  RF_ENFORCE(n == out.size(), "serialized ", n, " bytes, sized ", out.size());
}

SnapshotMeta restore_state(std::span<const std::byte> image, nn::Module& model, optim::Optimizer& optimizer,
                           const RestoreExpect& expect, const std::string& source, std::string* digest_out) {
  // 1. The image is the staging buffer: validate all of it before touching S (R6).
  const SafetensorsReader r =
      SafetensorsReader::borrow(image, source, {.verify_integrity = false, .require_integrity = true});
  std::vector<int64_t> counters;
  const std::vector<Part> parts = state_parts(model, optimizer, counters);
  // rf_state_digest is recomputed from the image's data on a second thread, in
  // rf::state_digest's format (core's StateDigestBuilder), while this one checks the CRCs
  // and the image digest: the two hashes cost about the same, and a recovery's receiver has
  // the core of its source, which waits. Only the image's bytes are read (the live state is
  // untouched until the swap); a tensor missing or of another size is left to
  // check_tensors below, which throws. parts[] holds the parameters, then the buffers, in
  // the order and with the numels of the live ones, under their image names.
  const std::vector<NamedTensor> params = model.named_parameters(), buffers = optimizer.named_buffers();
  const size_t n_tensors = params.size() + buffers.size();
  auto live = [&](size_t k) -> const NamedTensor& { return k < params.size() ? params[k] : buffers[k - params.size()]; };
  std::vector<const TensorInfo*> data_of(n_tensors);
  bool layout_ok = true;
  for (size_t k = 0; k < n_tensors; ++k) {
    data_of[k] = r.find(parts[k].name);
    layout_ok = layout_ok && data_of[k] && data_of[k]->dtype == DType::F32 &&
                data_of[k]->numel() == live(k).second.numel();
  }
  StateDigestBuilder feed;
  std::thread hasher;
  if (layout_ok)
    hasher = std::thread([&] {
      auto hash = [&](size_t from, size_t to) {
        feed.group(to - from);
        for (size_t k = from; k < to; ++k) feed.tensor(live(k).first, live(k).second.numel(), r.bytes(*data_of[k]));
      };
      hash(0, params.size());
      hash(params.size(), n_tensors);
    });
  struct Join {  // every way out of here, a throw included, waits for the hasher first
    std::thread& t;
    ~Join() {
      if (t.joinable()) t.join();
    }
  } join{hasher};
  r.verify_integrity();
  const SnapshotMeta meta = read_snapshot_meta(r);
  auto it = r.metadata().find(kRfDigestKey);
  if (it == r.metadata().end()) throw FormatError(source, "", str("metadata '", kRfDigestKey, "' is missing"));
  const std::string& rf_digest = it->second;

  if (!expect.model.empty() && meta.model != expect.model)
    throw ForeignStateError(source, "",
                            str("is a snapshot of model '", meta.model, "', expected '", expect.model, "'"));
  if (!expect.optimizer.empty() && meta.optimizer != expect.optimizer)
    throw ForeignStateError(source, "",
                            str("holds optimizer '", meta.optimizer, "' state, expected '", expect.optimizer, "'"));
  if (!expect.job_id.empty() && meta.job_id != expect.job_id)
    throw ForeignStateError(source, "",
                            meta.job_id.empty() ? str("records no job id, expected job ", expect.job_id, "'s")
                                                : str("was written by job ", meta.job_id, ", expected job ", expect.job_id));
  if (expect.step && meta.step != *expect.step)
    throw MismatchError(source, "", str("is the state of step ", meta.step, ", expected step ", *expect.step));
  if (!expect.digest.empty() && rf_digest != expect.digest)
    throw ChecksumError(source, "", str("state digest is ", rf_digest, ", expected ", expect.digest));

  std::vector<ExpectedTensor> want;
  for (const auto& p : parts) want.push_back({p.name, p.dtype, p.shape});
  try {
    check_tensors(r, want);  // exact set: names, shapes, dtypes; every difference listed
  } catch (const MismatchError& e) {
    throw ForeignStateError(e.source(), e.tensor(), e.problem());  // intact, but not this model's
  }

  const auto counter_names = optimizer.named_counters();
  std::vector<std::pair<std::string, int64_t>> new_counters;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].dtype != DType::I64) continue;
    int64_t v = 0;
    std::memcpy(&v, r.bytes(r.at(parts[i].name)).data(), sizeof(int64_t));
    if (v < 0) throw FormatError(source, parts[i].name, str("counter is ", v, ", expected >= 0"));
    new_counters.push_back({counter_names[new_counters.size()].first, v});
  }
  // check_tensors passed, so every tensor was there with its size: the hasher ran.
  RF_ENFORCE(layout_ok, "restore_state: tensors checked but not hashed");
  hasher.join();
  const std::string data_digest = feed.finish(new_counters);
  if (data_digest != rf_digest)
    throw ChecksumError(source, "", str("the data's state digest is ", data_digest, ", the image records ",
                                        kRfDigestKey, " ", rf_digest));

  // 2. Swap in: plain copies into memory validated above; nothing here can fail.
  //
  // Why `data_digest` IS state_digest_of(model, optimizer) after this loop: that function
  // hashes, through the same StateDigestBuilder steps, the parameters then the buffers —
  // each by its live name, its numel and its 4 * numel bytes — then the counters by name
  // and value. feed hashed the same
  // names (taken from the live model and optimizer), the same numels (check_tensors made
  // every image shape equal the live one) and, for each, the image bytes of the tensor of
  // that name — exactly what the memcpy below puts into that tensor; and the counters'
  // names in named_counters() order with the values set_counter stores below. Nothing
  // else writes S in between.
  for (size_t i = 0, c = 0; i < parts.size(); ++i) {
    if (parts[i].dtype == DType::I64) {
      optimizer.set_counter(new_counters[c].first, new_counters[c].second);
      ++c;
      continue;
    }
    auto b = r.bytes(r.at(parts[i].name));
    if (!b.empty()) std::memcpy(parts[i].data, b.data(), b.size());
  }
  if (digest_out) *digest_out = data_digest;
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
