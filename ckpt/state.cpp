#include "ckpt/state.h"

#include <cstring>
#include <thread>

#include "base/enforce.h"
#include "base/str.h"
#include "ckpt/check.h"
#include "ckpt/format_error.h"
#include "ckpt/safetensors.h"
#include "ckpt/host_staging.h"
#include "core/state_digest.h"

namespace rf::ckpt {
namespace {

// One tensor of S as the image holds it. `data` is host bytes of it (or, for counters, of
// State::counters) — unless the state was collected without staging, when a tensor's is
// its own memory, on whatever device: then only its address and size are used.
struct Part {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void* data;
  size_t bytes;
  Tensor tensor;        // the live tensor (undefined for counters)
  bool staged = false;  // data is a copy in a HostStaging, not the tensor's own memory
};

// S, collected: parameters, then optimizer buffers, then counters (the writer puts the
// 8-byte counters first in the file; the order here only fixes ties). Built in place: the
// counter parts point into `counters`.
struct State {
  std::vector<NamedTensor> params, buffers;
  std::vector<std::pair<std::string, int64_t>> named_counters;
  std::vector<int64_t> counters;
  std::vector<Part> parts;
  State(const State&) = delete;
  State() = default;
};

std::vector<int64_t> dims(const Tensor& t) {
  std::vector<int64_t> out;
  for (int i = 0; i < t.dim(); ++i) out.push_back(t.size(i));
  return out;
}

// `staging` given: every tensor's bytes through it (HostStaging: a CPU tensor's own
// memory, another device's copied to the host). Null: no data is read.
void collect(State& s, const nn::Module& model, const optim::Optimizer& optimizer, HostStaging* staging) {
  s.params = model.named_parameters();
  s.buffers = optimizer.named_buffers();
  std::vector<Tensor> tensors;
  tensors.reserve(s.params.size() + s.buffers.size());
  for (const auto& [name, t] : s.params) tensors.push_back(t);
  for (const auto& [name, t] : s.buffers) tensors.push_back(t);
  std::vector<std::span<const std::byte>> views;
  if (staging) views = staging->stage(tensors);
  for (size_t k = 0; k < tensors.size(); ++k) {
    const Tensor& t = tensors[k];
    std::string name = k < s.params.size() ? s.params[k].first : kOptimPrefix + s.buffers[k - s.params.size()].first;
    const void* data = staging ? static_cast<const void*>(views[k].data()) : static_cast<const void*>(t.data());
    s.parts.push_back({std::move(name), DType::F32, dims(t), data, sizeof(float) * static_cast<size_t>(t.numel()), t,
                       staging && HostStaging::copies(t)});
  }
  s.named_counters = optimizer.named_counters();
  s.counters.resize(s.named_counters.size());  // sized before any pointer into it is taken
  for (size_t i = 0; i < s.named_counters.size(); ++i) {
    s.counters[i] = s.named_counters[i].second;
    s.parts.push_back({kOptimPrefix + s.named_counters[i].first, DType::I64, {}, &s.counters[i], sizeof(int64_t), {}});
  }
}

// rf::state_digest's format (core's StateDigestBuilder) over the parts' host bytes: the
// parameters then the buffers by their live names, then the counters.
std::string digest_of(const State& s) {
  StateDigestBuilder d;
  auto hash = [&](const std::vector<NamedTensor>& ts, size_t first_part) {
    d.group(ts.size());
    for (size_t k = 0; k < ts.size(); ++k) {
      const Part& p = s.parts[first_part + k];
      d.tensor(ts[k].first, ts[k].second.numel(), {static_cast<const std::byte*>(p.data), p.bytes});
    }
  };
  hash(s.params, 0);
  hash(s.buffers, s.params.size());
  return d.finish(s.named_counters);
}

void write_meta(SafetensorsWriter& w, const SnapshotMeta& meta, const std::string& rf_digest) {
  write_snapshot_meta(w, meta);
  w.set_metadata(kRfDigestKey, rf_digest);
}

}  // namespace

std::string state_digest_of(const nn::Module& model, const optim::Optimizer& optimizer, HostStaging* staging) {
  HostStaging local;
  State s;
  collect(s, model, optimizer, staging ? staging : &local);
  return digest_of(s);
}

size_t snapshot_size(const nn::Module& model, const optim::Optimizer& optimizer, const SnapshotMeta& meta) {
  State s;
  collect(s, model, optimizer, nullptr);  // addresses only: nothing is read
  SafetensorsWriter w;
  for (auto& p : s.parts) w.add(p.name, p.dtype, p.shape, p.data);
  write_meta(w, meta, std::string(kDigestChars, '0'));  // same length as the real digest
  return w.serialized_size();
}

void serialize_state(const nn::Module& model, const optim::Optimizer& optimizer, const SnapshotMeta& meta,
                     std::vector<std::byte>& out, const std::string& rf_digest, HostStaging* staging) {
  HostStaging local;
  State s;
  collect(s, model, optimizer, staging ? staging : &local);
  SafetensorsWriter w;
  for (auto& p : s.parts) w.add(p.name, p.dtype, p.shape, p.data);
  write_meta(w, meta, rf_digest.empty() ? digest_of(s) : rf_digest);
  out.resize(w.serialized_size());  // within capacity after the first time: no new pages
  const size_t n = w.serialize_into(out);
  RF_ENFORCE(n == out.size(), "serialized ", n, " bytes, sized ", out.size());
}

SnapshotMeta restore_state(std::span<const std::byte> image, nn::Module& model, optim::Optimizer& optimizer,
                           const RestoreExpect& expect, const std::string& source, std::string* digest_out) {
  // 1. The image is the staging buffer: validate all of it before touching S (R6).
  const SafetensorsReader r =
      SafetensorsReader::borrow(image, source, {.verify_integrity = false, .require_integrity = true});
  State st;
  collect(st, model, optimizer, nullptr);  // the live tensors are only written, in the swap
  const std::vector<Part>& parts = st.parts;
  // rf_state_digest is recomputed from the image's data on a second thread, in
  // rf::state_digest's format (core's StateDigestBuilder), while this one checks the CRCs
  // and the image digest: the two hashes cost about the same, and a recovery's receiver has
  // the core of its source, which waits. Only the image's bytes are read (the live state is
  // untouched until the swap); a tensor missing or of another size is left to
  // check_tensors below, which throws. parts[] holds the parameters, then the buffers, in
  // the order and with the numels of the live ones, under their image names.
  const std::vector<NamedTensor>& params = st.params;
  const std::vector<NamedTensor>& buffers = st.buffers;
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
  require_digest_version(source, kRfDigestKey, rf_digest);

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
  if (expect.gradient_sum && meta.gradient_sum != *expect.gradient_sum) {
    const auto mode = [](const std::string& g) {
      return g.empty() ? std::string("with the float sum (no --exact)")
                       : str("in exact mode with ", g.substr(g.find('/') + 1), " micro-shards (--exact --micro-shards ",
                             g.substr(g.find('/') + 1), ")");
    };
    throw ForeignStateError(source, "", str("was trained ", mode(meta.gradient_sum), "; this run trains ",
                                            mode(*expect.gradient_sum), ": resume with the same setting"));
  }
  if (expect.step && meta.step != *expect.step)
    throw MismatchError(source, "", str("is the state of step ", meta.step, ", expected step ", *expect.step));
  if (!expect.digest.empty() && !same_digest(source, rf_digest, expect.digest, "its state digest against the expected"))
    throw ChecksumError(source, "", str("state digest is ", rf_digest, ", expected ", expect.digest));

  std::vector<ExpectedTensor> want;
  for (const auto& p : parts) want.push_back({p.name, p.dtype, p.shape});
  try {
    check_tensors(r, want);  // exact set: names, shapes, dtypes; every difference listed
  } catch (const MismatchError& e) {
    throw ForeignStateError(e.source(), e.tensor(), e.problem());  // intact, but not this model's
  }

  const auto& counter_names = st.named_counters;
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
  // that name — exactly what the write-back below puts into that tensor; and the counters'
  // names in named_counters() order with the values set_counter stores below. Nothing
  // else writes S in between.
  for (size_t i = 0, c = 0; i < parts.size(); ++i) {
    if (parts[i].dtype == DType::I64) {
      optimizer.set_counter(new_counters[c].first, new_counters[c].second);
      ++c;
      continue;
    }
    // A memcpy on the CPU; DeviceRuntime::write for a tensor on another device.
    HostStaging::write_back(parts[i].tensor, r.bytes(r.at(parts[i].name)));
  }
  if (digest_out) *digest_out = data_digest;
  return meta;
}

void StateCopy::capture(const nn::Module& model, const optim::Optimizer& optimizer, const SnapshotMeta& meta) {
  // Tensors off the CPU are copied into staging_ (owned here until the next capture);
  // CPU tensors and the counters are copied into data_.
  State s;
  collect(s, model, optimizer, &staging_);
  size_t total = 0;
  for (const auto& p : s.parts) total += p.staged ? 0 : p.bytes;
  data_.resize(total);  // reused capacity after the first capture
  entries_.clear();
  size_t at = 0;
  for (auto& p : s.parts) {
    if (!p.staged) {
      if (p.bytes) std::memcpy(data_.data() + at, p.data, p.bytes);
      p.data = data_.data() + at;
      at += p.bytes;
    }
    entries_.push_back({p.name, p.dtype, p.shape, p.data, p.bytes});
  }
  meta_ = meta;
  // The digest of the copy: the same bytes as the live state's at this step boundary.
  rf_digest_ = digest_of(s);
}

void StateCopy::serialize(std::vector<std::byte>& out) const {
  SafetensorsWriter w;
  for (const auto& e : entries_) w.add(e.name, e.dtype, e.shape, e.data);
  write_meta(w, meta_, rf_digest_);
  out.resize(w.serialized_size());
  const size_t n = w.serialize_into(out);
  RF_ENFORCE(n == out.size(), "serialized ", n, " bytes, sized ", out.size());
}

}  // namespace rf::ckpt
