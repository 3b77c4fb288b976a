#include <doctest/doctest.h>

#include "ckpt/check.h"
#include "ckpt/safetensors.h"
#include "st_util.h"

using namespace rf::ckpt;

TEST_CASE("the checker lists every missing, unexpected, wrong-shape and wrong-dtype tensor") {
  st_test::SampleState s;
  auto r = SafetensorsReader::from_bytes(s.writer().to_bytes(), "init.safetensors");
  std::vector<ExpectedTensor> expected = {
      {"0.weight", DType::F32, {5, 3}},      // matches
      {"0.bias", DType::F32, {6}},           // wrong shape
      {"opt.momentum", DType::F32, {7}},     // wrong dtype
      {"2.weight", DType::F32, {10, 5}},     // missing
      {"steps", DType::I64, {3}},            // matches
  };                                         // "counters" is unexpected
  auto ms = compare_tensors(r.tensors(), expected);
  REQUIRE(ms.size() == 4);
  CHECK(ms[0].kind == Mismatch::Kind::WrongShape);
  CHECK(ms[0].name == "0.bias");
  CHECK(ms[0].detail == "shape is [5], expected [6]");
  CHECK(ms[1].kind == Mismatch::Kind::WrongDType);
  CHECK(ms[1].detail == "dtype is F64, expected F32");
  CHECK(ms[2].kind == Mismatch::Kind::Missing);
  CHECK(ms[2].detail == "missing (expected F32 [10, 5])");
  CHECK(ms[3].kind == Mismatch::Kind::Unexpected);
  CHECK(ms[3].name == "counters");

  try {
    check_tensors(r, expected);
    FAIL("mismatches must throw");
  } catch (const MismatchError& e) {
    const std::string m = e.what();
    CHECK(m.rfind("init.safetensors: 4 tensors do not match the model: ", 0) == 0);
    CHECK(st_test::has(m, "'2.weight' missing"));
    CHECK(st_test::has(m, "'counters' unexpected (U64 [1, 3])"));
  }
  // Extra tensors may be allowed; the others still count.
  CHECK_THROWS_WITH_AS(check_tensors(r, expected, /*allow_unexpected=*/true),
                       doctest::Contains("3 tensors do not match"), MismatchError);

  std::vector<ExpectedTensor> all;
  for (const auto& t : r.tensors()) all.push_back({t.name, t.dtype, t.shape});
  CHECK(compare_tensors(r.tensors(), all).empty());
  CHECK_NOTHROW(check_tensors(r, all));
}
