#pragma once
// ControlBlock — the few numbers every rank must agree on at the same step (docs/protocol.md
// R3, R5), carried as the tail of the last gradient bucket so they cost no extra round
// trip. Its sum over ranks is bitwise the same on every rank (R4), so every rank divides
// by the same global sample count and acts on the same flags after the same step.
//
// Encoded as float32 next to the gradients: sample counts and flag counts are small
// integers, exact in float32 below 2^24 (enforced per rank; a sum over ranks stays exact
// while it is below 2^24). The reducer divides the gradients by the summed samples slot
// as it lies in device memory; decode accepts only integral floats below 2^40, for which
// static_cast<float>(samples) is that very float, so the division has the bits of one by
// the decoded count. Exact mode (R7) carries the same fields, in the same order, as int64.
#include <cstdint>

namespace rf::ddp {

struct ControlBlock {
  int64_t samples = 0;      // local samples of this step (summed: the global count)
  int64_t reconfigure = 0;  // ranks asking to leave g after this step (joiners wait, R5)
  int64_t stop = 0;         // ranks asking for a graceful stop after this step
  int64_t checkpoint = 0;   // ranks asking for a checkpoint after this step

  // The fields above, in the order encode writes them.
  static constexpr int kFields = 4;
  static constexpr int kFloats = kFields;
  static constexpr int64_t kMaxValue = int64_t{1} << 24;
  // Throws rf::InvalidInput for a value that float32 cannot carry exactly.
  void encode(float* out) const;
  static ControlBlock decode(const float* in);
  // As int64 (exact mode): any value is exact; decode throws rf::Error on a negative sum.
  void encode(int64_t* out) const;
  static ControlBlock decode(const int64_t* in);
};

}  // namespace rf::ddp
