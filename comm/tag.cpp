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
  constexpr int kLow = kChunkBits + 1;  // chunk and the reply bit
  return (generation << (kStepBits + kOpBits + kLow)) | (step << (kOpBits + kLow)) | (uint64_t{op} << kLow) |
         (uint64_t{reply} << kReplyBit) | uint64_t{chunk};
}

StepTag StepTag::decode(uint64_t bits) {
  StepTag t;
  constexpr int kLow = kChunkBits + 1;
  t.chunk = static_cast<uint32_t>(bits & kMaxChunk);
  t.reply = ((bits >> kReplyBit) & 1) != 0;
  t.op = static_cast<uint32_t>((bits >> kLow) & kMaxOp);
  t.step = (bits >> (kOpBits + kLow)) & kMaxStep;
  t.generation = bits >> (kStepBits + kOpBits + kLow);
  return t;
}

std::string StepTag::str() const {
  return rf::str("g=", generation, " s=", step, " op=", op, " chunk ", chunk, reply ? " reply" : "");
}

}  // namespace rf::comm
