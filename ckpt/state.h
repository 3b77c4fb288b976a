#pragma once
// The state S of a worker (docs/protocol.md: parameters + optimizer buffers + step) as ONE
// safetensors byte image: what goes to disk and what a peer sends in recovery step 6.
//
// Tensor names in the image:
//   <param>                  F32, each parameter by its name ("1.weight")
//   optim.<buffer>           F32, each optimizer buffer ("optim.1.weight.momentum_buffer")
//   optim.<counter>          I64 scalar, each optimizer counter ("optim.1.weight.step")
// and __metadata__ per snapshot_meta.h (step, generation, ...) plus "rf_state_digest":
// rf::state_digest(model, optimizer), the one digest of S used everywhere else (--metrics,
// recovery steps 2, 4 and 7).
//
// S may live on any one device. Its floats reach the host only through HostStaging
// (host_staging.h): a CPU tensor's memory is read in place; another device's tensors are
// copied into reusable pinned staging, one explicit read each. Restore writes back through
// the same path. An image does not record a device: one written from a device restores
// onto the CPU and the other way round, with the same digest.
//
//   std::vector<std::byte> image;                 // reused snapshot after snapshot
//   serialize_state(model, sgd, meta, image);
//   ... send or write image ...
//   SnapshotMeta m = restore_state(image, model, sgd, {.step = T, .digest = d});
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ckpt/host_staging.h"
#include "ckpt/snapshot_meta.h"
#include "core/nn/module.h"
#include "core/optim/optimizer.h"

namespace rf::ckpt {

inline constexpr const char* kOptimPrefix = "optim.";
inline constexpr const char* kRfDigestKey = "rf_state_digest";

// rf::state_digest(model, optimizer) (core/state_digest.h: the one definition of the
// format, StateDigestBuilder) of a state on any device, its bytes taken through `staging`
// (a temporary one when null; pass one kept beside the state to reuse its pinned memory).
std::string state_digest_of(const nn::Module& model, const optim::Optimizer& optimizer,
                            HostStaging* staging = nullptr);

// Bytes of the image serialize_state will produce (no pass over the data).
size_t snapshot_size(const nn::Module& model, const optim::Optimizer& optimizer, const SnapshotMeta& meta);

// Writes the image into `out`, resized to its exact size; `out`'s capacity is reused, so a
// buffer kept across snapshots is faulted in once. The tensors' bytes come through
// `staging` (as state_digest_of). One pass over S (SafetensorsWriter::serialize_into) plus,
// unless `rf_digest` is given, one for rf_state_digest (over the same host bytes: a device's
// state is read once). `rf_digest`: the caller's state_digest_of(model, optimizer) of this very
// state (the trainer's memo), so it is not computed again. A stale one cannot slip through:
// restore_state recomputes the digest from the image's data and refuses a mismatch.
void serialize_state(const nn::Module& model, const optim::Optimizer& optimizer, const SnapshotMeta& meta,
                     std::vector<std::byte>& out, const std::string& rf_digest = {},
                     HostStaging* staging = nullptr);

// What the receiver expects of an image; unset fields are not checked.
struct RestoreExpect {
  std::string model = {};            // metadata "model"
  std::string optimizer = {};        // metadata "optimizer"
  std::optional<int64_t> step = {};  // metadata "step" (recovery: T of the plan)
  std::string digest = {};           // rf_state_digest (recovery: the digest reported for T)
  std::string job_id = {};           // metadata "job_id" (a whole-job restart: its own job's)
  // metadata "gradient_sum" ("" = the float sum, as a file without the key): resuming from
  // disk checks it, since exact mode and the float sum (or two M) train different bits.
  std::optional<std::string> gradient_sum = {};
};

// R6: validates the WHOLE image first — header, every tensor's CRC32C, the metadata CRC,
// the image digest, the snapshot metadata, every name/shape/dtype against the model and
// optimizer (one MismatchError listing every difference), counters >= 0, rf_state_digest
// recomputed from the image's data (it must equal the recorded one), `expect` — while the
// image itself is the staging buffer and the live state is untouched. Only when all of it
// checked out are the bytes copied into the parameters, buffers and counters (a step that
// cannot fail). So a cut-short, corrupted or mismatched image throws FormatError (or a
// subclass) naming `source` and leaves the old state bitwise intact. The CRCs and the
// image digest are computed in one pass over the image, rf_state_digest meanwhile on a
// second thread (it reads the image only).
//
// `digest_out`, when given, receives state_digest_of(model, optimizer) of the state after
// the swap — without a pass over it: that is the digest just recomputed from the image
// (see the proof at the swap in state.cpp; tests/ckpt/test_state.cpp checks it).
SnapshotMeta restore_state(std::span<const std::byte> image, nn::Module& model, optim::Optimizer& optimizer,
                           const RestoreExpect& expect = {}, const std::string& source = "state image",
                           std::string* digest_out = nullptr);

// StateCopy — the state copied out at a step boundary into memory owned here (reused
// across captures), so a background thread can serialize and write it while training
// goes on (docs/architecture.md, one step's item 5). capture() costs one memcpy of the
// state (a CPU state) or one read per tensor into pinned staging (a device's), and one
// digest of the copy.
class StateCopy {
 public:
  void capture(const nn::Module& model, const optim::Optimizer& optimizer, const SnapshotMeta& meta);
  const SnapshotMeta& meta() const { return meta_; }
  // The same image serialize_state would have produced at capture time.
  void serialize(std::vector<std::byte>& out) const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    const void* data;  // into data_ or staging_
    size_t bytes;
  };
  std::vector<std::byte> data_;  // CPU tensors and counters
  HostStaging staging_;          // tensors on another device
  std::vector<Entry> entries_;
  SnapshotMeta meta_;
  std::string rf_digest_;
};

}  // namespace rf::ckpt
