#pragma once
// TrainState — the state S of docs/protocol.md (parameters + optimizer buffers + step) as the
// trainer handles it: its digest, and its image for peer transfer (recovery step 6),
// which is ckpt/state.h's snapshot image — the very bytes a disk checkpoint holds.
//
// R6: a receiver never writes S directly. It receives the image into a staging buffer
// (reused), and ckpt::restore_state validates the whole image (CRCs, shapes, the step T of
// the plan and the digest every holder of T reported) before it copies anything in. A
// transfer cut short or corrupted leaves the live S bitwise intact.
//
// S may be on any one device: the digest and the image read it through ckpt::HostStaging
// (in place on the CPU; one read per tensor into pinned staging kept here, elsewhere), and
// a restore writes it back through the device's runtime.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ckpt/host_staging.h"
#include "ckpt/snapshot_meta.h"
#include "core/nn/module.h"
#include "core/optim/optimizer.h"

namespace rf::ddp {

class TrainState {
 public:
  TrainState(nn::Module& model, optim::Optimizer& optimizer, std::string model_name = "model");

  int64_t step() const { return step_; }
  // After the optimizer update of step s (R1); S changed, so the memo is dropped.
  void set_step(int64_t s) {
    step_ = s;
    state_changed();
  }
  // rf::state_digest(model, optimizer): the one digest of S (reports, step 7, --metrics).
  // The step travels beside it (reports and the all-gather carry both). Always computed.
  std::string digest() const;
  // The same digest, computed once and remembered until S may have changed: set_step,
  // restore_verified, or state_changed() (the trainer calls it after user code that could
  // write S, e.g. on_step). A pass over S costs ~0.1-0.5 s for 100M parameters with
  // momentum, and one recovery asks for it up to three times (report, audit, verify).
  const std::string& current_digest() const;
  void state_changed() { memo_valid_ = false; }
  // Bytes of write_image's image (no pass over the data; the header's step and generation
  // digits may make a real image a few bytes longer).
  size_t image_size() const;
  // Makes `buf` a staging buffer for this state's image: image_size() plus slack for the
  // header's varying digits, every page resident (never shrunk). The pages are made
  // resident by rf::populate_pages (madvise(MADV_POPULATE_WRITE) in 16 MiB calls: the kernel
  // fills them in a loop, not one trap per page from user space: 800 MB in 0.41-0.55 s
  // against 0.69-0.78 s touched here, bench/RESULTS.md), and the zero fill then writes
  // resident pages (~50 ms). Where madvise fails, populate_pages touches them instead.
  void prepare_staging(std::vector<std::byte>& buf) const;
  // The image of the live state (resized to fit; capacity reused), with current_digest()
  // as its rf_state_digest: one pass over S when the memo is valid.
  void write_image(uint64_t generation, int world, std::vector<std::byte>& out) const;
  // R6: validates `image` completely — it must hold step `expect_step` with digest
  // `expect_digest`, recomputed from its data — and only then copies it into the live
  // state. Throws rf::InvalidInput (ckpt::FormatError) naming `source` and what was wrong,
  // with the live state untouched. Afterwards current_digest() is that recomputed digest
  // (the state's by construction) without another pass over S.
  void restore_verified(std::span<const std::byte> image, int64_t expect_step, const std::string& expect_digest,
                        const std::string& source);

 private:
  nn::Module& model_;
  optim::Optimizer& optimizer_;
  std::string model_name_;
  ckpt::SnapshotMeta meta(uint64_t generation, int world) const;  // of the image of S now

  int64_t step_ = -1;
  // Host copies of a device's S for digest() and write_image() (training thread only;
  // image_size() and prepare_staging() read no data and never touch it).
  mutable ckpt::HostStaging staging_;
  mutable std::string memo_;
  mutable bool memo_valid_ = false;
};

}  // namespace rf::ddp
