#include "comm/tag.h"

#include "base/error.h"
#include "base/str.h"

namespace rf::comm {

namespace {
void check_fits(const char* field, uint64_t value, uint64_t max) {
  if (value > max) {
    throw rf::InvalidInput(rf::str("tag field ", field, " = ", value, " does not fit (max ", max, ")"));
  }
}
}  // namespace

uint64_t StepTag::encode() const {
  check_fits("generation", generation, kMaxGeneration);
  check_fits("step", step, kMaxStep);
  check_fits("op", op, kMaxOp);
  check_fits("chunk", chunk, kMaxChunk);
  return (generation << (kStepBits + kOpBits + kChunkBits)) | (step << (kOpBits + kChunkBits)) |
         (uint64_t{op} << kChunkBits) | uint64_t{chunk};
}

StepTag StepTag::decode(uint64_t bits) {
  StepTag t;
  t.chunk = static_cast<uint32_t>(bits & kMaxChunk);
  t.op = static_cast<uint32_t>((bits >> kChunkBits) & kMaxOp);
  t.step = (bits >> (kOpBits + kChunkBits)) & kMaxStep;
  t.generation = bits >> (kStepBits + kOpBits + kChunkBits);
  return t;
}

std::string StepTag::str() const {
  return rf::str("g=", generation, " s=", step, " op=", op, " chunk ", chunk);
}

}  // namespace rf::comm
