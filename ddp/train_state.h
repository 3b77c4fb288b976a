#pragma once
// TrainState — the state S of PROTOCOL.md (parameters + optimizer buffers + step) as a
// list of named float spans and counters, with its digest and a flat byte image for peer
// transfer (recovery step 6).
//
// R6: a receiver never writes S directly. It receives the image into a staging buffer
// (pre-allocated, reused), checks the image's size and header and the digest of the
// STAGED state against the digest the plan promised, and only then copies it in
// (`restore_verified`). A transfer cut short or corrupted leaves the live S intact.
//
// Image: "RFSTATE1" | u64 step+1 | u64 #tensors | u64 #counters | floats of every tensor
// in order | i64 of every counter. Both sides hold the same model and optimizer, so the
// size is known to the receiver before anything arrives (comm's receives name the size).
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/nn/module.h"
#include "core/optim/optimizer.h"

namespace rf::ddp {

class TrainState {
 public:
  TrainState(nn::Module& model, optim::Optimizer& optimizer);

  int64_t step() const { return step_; }
  void set_step(int64_t s) { step_ = s; }  // after the optimizer update of step s (R1)
  // Digest of (step, every tensor with its name, every counter): what a worker reports
  // (step 2) and what ranks compare (step 7).
  std::string digest() const;
  size_t image_bytes() const { return image_bytes_; }
  // Writes the image of the live state into `out` (image_bytes() of it).
  void write_image(std::span<std::byte> out) const;
  // R6: checks `image` (size, header, digest of the staged contents == expected_digest)
  // and only then copies it into the live state. Throws rf::InvalidInput naming what was
  // wrong, with the live state untouched.
  void restore_verified(std::span<const std::byte> image, const std::string& expected_digest);

 private:
  struct Named {
    std::string name;
    float* data;
    size_t count;
  };
  std::vector<Named> tensors_;  // parameters then optimizer buffers
  optim::Optimizer& optimizer_;
  int64_t step_ = -1;
  size_t image_bytes_ = 0;
};

}  // namespace rf::ddp
