#include "ddp/control_block.h"

#include <cmath>

#include "base/error.h"
#include "base/str.h"

namespace rf::ddp {

void ControlBlock::encode(float* out) const {
  const int64_t v[kFloats] = {samples, reconfigure, stop, checkpoint};
  for (int i = 0; i < kFloats; ++i) {
    if (v[i] < 0 || v[i] >= kMaxValue)
      throw InvalidInput(str("ddp control block: value ", v[i], " (field ", i, ") outside [0, 2^24)"));
    out[i] = static_cast<float>(v[i]);
  }
}

ControlBlock ControlBlock::decode(const float* in) {
  int64_t v[kFloats];
  for (int i = 0; i < kFloats; ++i) {
    // A sum of W values below 2^24 each; anything else means a corrupted reduction.
    if (!(in[i] >= 0.0f) || in[i] >= 0x1p40f || std::nearbyint(in[i]) != in[i])
      throw Error(str("ddp control block: reduced field ", i, " is ", in[i], ", not a count"));
    v[i] = static_cast<int64_t>(in[i]);
  }
  return {v[0], v[1], v[2], v[3]};
}

}  // namespace rf::ddp
