#include "ddp/control_block.h"

#include <cmath>

#include "base/error.h"
#include "base/str.h"

namespace rf::ddp {

void ControlBlock::encode(int64_t* out) const {
  const int64_t v[kFields] = {samples, reconfigure, stop, checkpoint};
  for (int i = 0; i < kFields; ++i) out[i] = v[i];
}

ControlBlock ControlBlock::decode(const int64_t* in) {
  for (int i = 0; i < kFields; ++i)
    if (in[i] < 0) throw Error(str("ddp control block: reduced field ", i, " is ", in[i], ", not a count"));
  return {in[0], in[1], in[2], in[3]};
}

void ControlBlock::encode(float* out) const {
  int64_t v[kFields];
  encode(v);
  for (int i = 0; i < kFloats; ++i) {
    if (v[i] < 0 || v[i] >= kMaxValue)
      throw InvalidInput(str("ddp control block: value ", v[i], " (field ", i, ") outside [0, 2^24)"));
    out[i] = static_cast<float>(v[i]);
  }
}

ControlBlock ControlBlock::decode(const float* in) {
  int64_t v[kFields];
  for (int i = 0; i < kFloats; ++i) {
    // A sum of W values below 2^24 each; anything else means a corrupted reduction.
    if (!(in[i] >= 0.0f) || in[i] >= 0x1p40f || std::nearbyint(in[i]) != in[i])
      throw Error(str("ddp control block: reduced field ", i, " is ", in[i], ", not a count"));
    v[i] = static_cast<int64_t>(in[i]);
  }
  return decode(v);
}

}  // namespace rf::ddp
