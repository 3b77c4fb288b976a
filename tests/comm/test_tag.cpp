#include <doctest/doctest.h>

#include "base/error.h"
#include "comm/tag.h"

using rf::comm::StepTag;

TEST_CASE("StepTag round-trips every field, at the edges too") {
  for (StepTag t : {StepTag{0, 0, 0, 0}, StepTag{3, 812, 1, 5},
                    StepTag{StepTag::kMaxGeneration, StepTag::kMaxStep, StepTag::kMaxOp, StepTag::kMaxChunk},
                    StepTag{StepTag::kMaxGeneration, StepTag::kMaxStep, StepTag::kMaxOp, StepTag::kMaxChunk, true}}) {
    CHECK(StepTag::decode(t.encode()) == t);
  }
  CHECK(StepTag{3, 812, 1, 5}.str() == "g=3 s=812 op=1 chunk 5");
  CHECK(StepTag{3, 812, 1, 5, true}.str() == "g=3 s=812 op=1 chunk 5 reply");
}

TEST_CASE("StepTag fields do not overlap") {
  const uint64_t g = StepTag{1, 0, 0, 0}.encode(), s = StepTag{0, 1, 0, 0}.encode();
  const uint64_t o = StepTag{0, 0, 1, 0}.encode(), c = StepTag{0, 0, 0, 1}.encode();
  CHECK(g == (uint64_t{1} << 48));
  CHECK(s == (uint64_t{1} << 24));
  CHECK(o == (uint64_t{1} << 16));
  CHECK(c == 1);
  CHECK(StepTag{0, 0, 0, 0, true}.encode() == (uint64_t{1} << 15));
  // A single-copy reply never equals any data tag of the same (g, s, op).
  CHECK(StepTag{3, 5, 1, StepTag::kMaxChunk}.encode() < StepTag{3, 5, 1, 0, true}.encode());
  // Neighbouring generations never produce the same tag for the same (s, op, chunk).
  CHECK(StepTag{7, 99, 2, 3}.encode() != StepTag{8, 99, 2, 3}.encode());
}

TEST_CASE("StepTag rejects values that do not fit, naming the field") {
  auto fails_on = [](StepTag t, const char* field) {
    try {
      (void)t.encode();
      return false;
    } catch (const rf::InvalidInput& e) {
      return std::string(e.what()).find(field) != std::string::npos;
    }
  };
  CHECK(fails_on(StepTag{StepTag::kMaxGeneration + 1, 0, 0, 0}, "generation"));
  CHECK(fails_on(StepTag{0, StepTag::kMaxStep + 1, 0, 0}, "step"));
  CHECK(fails_on(StepTag{0, 0, StepTag::kMaxOp + 1, 0}, "op"));
  CHECK(fails_on(StepTag{0, 0, 0, StepTag::kMaxChunk + 1}, "chunk"));
}
