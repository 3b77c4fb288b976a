#include <doctest/doctest.h>

#include "base/error.h"
#include "ddp/control_block.h"

using namespace rf::ddp;

TEST_CASE("the control block round-trips through float32 and its sum is the sum of blocks") {
  ControlBlock a{128, 1, 0, 1}, b{96, 0, 1, 0};
  float fa[ControlBlock::kFloats], fb[ControlBlock::kFloats], sum[ControlBlock::kFloats];
  a.encode(fa);
  b.encode(fb);
  for (int i = 0; i < ControlBlock::kFloats; ++i) sum[i] = fa[i] + fb[i];
  const ControlBlock s = ControlBlock::decode(sum);
  CHECK(s.samples == 224);
  CHECK(s.reconfigure == 1);
  CHECK(s.stop == 1);
  CHECK(s.checkpoint == 1);
  CHECK(ControlBlock::decode(fa).samples == 128);
}

TEST_CASE("values float32 cannot carry exactly are refused; a corrupted sum is an error") {
  float f[ControlBlock::kFloats];
  CHECK_THROWS_AS((ControlBlock{ControlBlock::kMaxValue, 0, 0, 0}.encode(f)), rf::InvalidInput);
  CHECK_THROWS_AS((ControlBlock{-1, 0, 0, 0}.encode(f)), rf::InvalidInput);
  const float half[ControlBlock::kFloats] = {3.5f, 0, 0, 0};
  CHECK_THROWS_AS(ControlBlock::decode(half), rf::Error);
  const float neg[ControlBlock::kFloats] = {3, -1, 0, 0};
  CHECK_THROWS_AS(ControlBlock::decode(neg), rf::Error);
}

TEST_CASE("as int64 (exact mode) the control block has the float32 encoding's fields in its order") {
  const ControlBlock a{int64_t{1} << 40, 1, 0, 1}, b{96, 0, 1, 0};
  int64_t ia[ControlBlock::kFields], ib[ControlBlock::kFields], sum[ControlBlock::kFields];
  float fb[ControlBlock::kFloats];
  a.encode(ia);
  b.encode(ib);
  b.encode(fb);
  for (int i = 0; i < ControlBlock::kFields; ++i) {
    CHECK(static_cast<float>(ib[i]) == fb[i]);  // the same field at the same index
    sum[i] = ia[i] + ib[i];
  }
  const ControlBlock s = ControlBlock::decode(sum);  // no float32 limit: exact at any size
  CHECK(s.samples == (int64_t{1} << 40) + 96);
  CHECK(s.reconfigure == 1);
  CHECK(s.stop == 1);
  CHECK(s.checkpoint == 1);
  const int64_t neg[ControlBlock::kFields] = {3, 0, -1, 0};
  CHECK_THROWS_AS(ControlBlock::decode(neg), rf::Error);
}
