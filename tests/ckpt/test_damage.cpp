#include <doctest/doctest.h>

#include "ckpt/safetensors.h"
#include "st_util.h"

using namespace rf::ckpt;
using st_test::Bytes;
using st_test::has;
using st_test::raw_file;
using st_test::read_error;

namespace {

// Tensors and metadata of a reader, to compare "read back" with "as written".
bool same_content(const SafetensorsReader& a, const SafetensorsReader& b) {
  if (a.metadata() != b.metadata() || a.tensors().size() != b.tensors().size()) return false;
  for (const auto& t : a.tensors()) {
    const TensorInfo* u = b.find(t.name);
    if (!u || u->dtype != t.dtype || u->shape != t.shape) return false;
    auto x = a.bytes(t), y = b.bytes(*u);
    if (!std::equal(x.begin(), x.end(), y.begin(), y.end())) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("truncation at every offset gives a clear error naming the file") {
  st_test::SampleState s;
  const Bytes good = s.writer().to_bytes();
  for (size_t len = 0; len < good.size(); ++len) {
    const std::string m = read_error(Bytes(good.begin(), good.begin() + static_cast<long>(len)));
    INFO("truncated to ", len, " of ", good.size(), " bytes");
    REQUIRE(!m.empty());
    REQUIRE(m.rfind("test.safetensors: ", 0) == 0);
  }
  CHECK(has(read_error(Bytes(good.begin(), good.begin() + 5)), "file is 5 bytes, shorter than the 8-byte header length"));
  CHECK(has(read_error(Bytes(good.begin(), good.begin() + 40)), "exceeds the 32 bytes that follow"));
  CHECK(has(read_error(Bytes(good.begin(), good.end() - 1)), "run past the data section"));
}

TEST_CASE("every single-bit flip anywhere is detected (or changes nothing that is read)") {
  st_test::SampleState s;
  const Bytes good = s.writer().to_bytes();
  const auto reference = SafetensorsReader::from_bytes(good, "ref");
  size_t detected = 0, harmless = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      Bytes bad = good;
      bad[i] ^= static_cast<std::byte>(1 << bit);
      try {
        auto r = SafetensorsReader::from_bytes(bad, "test.safetensors");
        // Accepted: it must then read exactly what was written.
        INFO("flip of bit ", bit, " of byte ", i, " was accepted");
        REQUIRE(same_content(r, reference));
        ++harmless;
      } catch (const FormatError& e) {
        REQUIRE(std::string(e.what()).rfind("test.safetensors: ", 0) == 0);
        ++detected;
      }
    }
  }
  MESSAGE(detected, " of ", good.size() * 8, " bit flips detected, ", harmless, " harmless");
  // Our writer leaves no slack: every byte is covered by the JSON grammar, a CRC or the
  // digest (the padding spaces included: a flipped space is no longer whitespace).
  CHECK(harmless == 0);
}

TEST_CASE("a flipped data byte is reported as corruption of that tensor") {
  st_test::SampleState s;
  const Bytes good = s.writer().to_bytes();
  auto r = SafetensorsReader::from_bytes(good, "x");
  const TensorInfo& t = r.at("0.bias");
  Bytes bad = good;
  uint64_t n = 0;
  std::memcpy(&n, bad.data(), 8);
  bad[8 + n + t.begin + 3] ^= std::byte{0x10};
  try {
    SafetensorsReader::from_bytes(bad, "snap.safetensors");
    FAIL("corruption must be detected");
  } catch (const ChecksumError& e) {
    CHECK(e.source() == "snap.safetensors");
    CHECK(e.tensor() == "0.bias");
    CHECK(has(e.problem(), "corrupted: crc32c"));
  }
  // Without verification the same bytes are read (the structure is intact).
  CHECK_NOTHROW(SafetensorsReader::from_bytes(bad, "snap.safetensors", {.verify_integrity = false}));
}

TEST_CASE("a changed metadata value is reported") {
  st_test::SampleState s;
  auto w = s.writer();
  w.set_metadata("step", "150");
  Bytes f = w.to_bytes();
  const std::string text(reinterpret_cast<const char*>(f.data()), f.size());
  const size_t at = text.find("\"150\"");
  REQUIRE(at != std::string::npos);
  f[at + 3] = std::byte{'1'};  // "150" -> "151"
  try {
    SafetensorsReader::from_bytes(f, "snap.safetensors");
    FAIL("changed metadata must be detected");
  } catch (const ChecksumError& e) {
    CHECK(has(e.what(), "metadata corrupted"));
  }
}

TEST_CASE("wrong header lengths") {
  const std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  CHECK(read_error(raw_file(h, 8)).empty());
  CHECK(has(read_error(raw_file(h, 8, 0)), "header length (bytes 0-7) is 0"));
  CHECK(has(read_error(raw_file(h, 8, h.size() + 9)), "exceeds the"));
  CHECK(has(read_error(raw_file(h, 8, 1ULL << 62)), "over the limit"));
  CHECK(has(read_error(raw_file(h, 8, h.size() - 3)), "is not valid JSON"));
  // Too long by less than the data: the header swallows data bytes (here NULs).
  CHECK(has(read_error(raw_file(h, 8, h.size() + 4)), "has a NUL byte at byte 62: wrong header length"));
}

TEST_CASE("headers that are not JSON, or not the right JSON") {
  auto err = [](const std::string& h, size_t data = 0) { return read_error(raw_file(h, data)); };
  CHECK(has(err("this is not json"), "test.safetensors: header (bytes 8-24) is not valid JSON"));
  CHECK(has(err("{\"a\":"), "is not valid JSON"));
  CHECK(has(err("[1,2]"), "header is a JSON array, expected an object"));
  CHECK(has(err(R"({"__metadata__":{"k":1}})"), "__metadata__ value of 'k' is a JSON number, expected a string"));
  CHECK(has(err(R"({"__metadata__":[]})"), "__metadata__ is a JSON array"));
  CHECK(has(err(R"({"a":5})"), "tensor 'a': entry is a JSON number, expected an object"));
  CHECK(has(err(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", 4), "tensor 'a': missing field 'dtype'"));
  CHECK(has(err(R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", 4), "missing field 'shape'"));
  CHECK(has(err(R"({"a":{"dtype":"F32","shape":[1]}})", 4), "missing field 'data_offsets'"));
  CHECK(has(err(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", 4), "unexpected field 'x'"));
  CHECK(has(err(R"({"a":{"dtype":"F31","shape":[1],"data_offsets":[0,4]}})", 4), "unknown dtype 'F31'"));
  CHECK(has(err(R"({"a":{"dtype":3,"shape":[1],"data_offsets":[0,4]}})", 4), "'dtype' is a JSON number"));
  CHECK(has(err(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4), "'shape' has element -1"));
  CHECK(has(err(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4), "'shape' has element 1.5"));
  CHECK(has(err(R"({"a":{"dtype":"F32","shape":7,"data_offsets":[0,4]}})", 4), "'shape' is a JSON number"));
  CHECK(has(err(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4), "'data_offsets' is [0]"));
  CHECK(has(err(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 4), "end before they begin"));
  CHECK(has(err(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})", 4), "run past the data section of 4 bytes"));
  CHECK(has(err(R"({"":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4), "empty name"));
  CHECK(has(err("[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"),
            "nests deeper"));
}

TEST_CASE("a tensor whose shape does not match its bytes") {
  const std::string h = R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})";
  CHECK(has(read_error(raw_file(h, 20)),
            "test.safetensors: tensor 'w': shape [2, 3] of F32 needs 24 bytes but data_offsets [0, 20] hold 20"));
  const std::string huge = R"({"w":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})";
  CHECK(has(read_error(raw_file(huge, 8)), "needs more than 2^64 bytes"));
}

TEST_CASE("offsets must tile the data section: overlaps, gaps and trailing bytes") {
  const std::string overlap =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  CHECK(has(read_error(raw_file(overlap, 12)), "tensor 'b': data_offsets [4, 12] overlap tensor 'a' [0, 8]"));
  const std::string same =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  CHECK(has(read_error(raw_file(same, 8)), "overlap"));
  const std::string gap =
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  CHECK(has(read_error(raw_file(gap, 12)), "tensor 'b': bytes [4, 8) of the data section before it belong to no tensor"));
  const std::string one = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  CHECK(has(read_error(raw_file(one, 6)), "the data section is 6 bytes but the tensors cover 4 (trailing bytes)"));
}

TEST_CASE("duplicate names and duplicate fields are refused (JSON parsers would keep the last)") {
  const std::string dup =
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  CHECK(has(read_error(raw_file(dup, 8)), "duplicate tensor name 'a'"));
  const std::string dupf = R"({"a":{"dtype":"F32","shape":[1],"shape":[1],"data_offsets":[0,4]}})";
  CHECK(has(read_error(raw_file(dupf, 4)), "duplicate key 'shape' in the entry of 'a'"));
}
