#include <doctest/doctest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "ckpt/safetensors.h"
#include "ckpt/snapshot_meta.h"
#include "st_util.h"

using namespace rf::ckpt;
using st_test::Bytes;

namespace {

template <typename T>
std::vector<T> read_vec(const SafetensorsReader& r, const std::string& name, DType dt) {
  const TensorInfo& t = r.at(name);
  std::vector<T> out(static_cast<size_t>(t.numel()));
  r.copy_to(name, dt, t.shape, out.data());
  return out;
}

}  // namespace

TEST_CASE("round trip through bytes keeps names, dtypes, shapes, values and metadata") {
  st_test::SampleState s;
  auto w = s.writer();
  Bytes bytes = w.to_bytes();
  auto r = SafetensorsReader::from_bytes(bytes, "mem", {.verify_integrity = true, .require_integrity = true});
  REQUIRE(r.tensors().size() == 5);
  CHECK(r.has_integrity());
  CHECK(r.metadata().at("model") == "tiny");
  CHECK(r.at("0.weight").shape == std::vector<int64_t>{5, 3});
  CHECK(r.at("counters").dtype == DType::U64);
  CHECK(read_vec<float>(r, "0.weight", DType::F32) == s.w);
  CHECK(read_vec<float>(r, "0.bias", DType::F32) == s.b);
  CHECK(read_vec<double>(r, "opt.momentum", DType::F64) == s.m);
  CHECK(read_vec<int64_t>(r, "steps", DType::I64) == s.steps);
  CHECK(read_vec<uint64_t>(r, "counters", DType::U64) == s.counters);
  CHECK(r.state_digest() == w.state_digest());
  CHECK(r.metadata().at(kDigestKey) == w.state_digest());
}

TEST_CASE("serialize_into a reused buffer gives the same image as to_bytes") {
  st_test::SampleState s;
  auto w = s.writer();
  const Bytes image = w.to_bytes();
  REQUIRE(w.serialized_size() == image.size());
  Bytes buf(image.size() + 100, std::byte{0x7F});
  CHECK(w.serialize_into(buf) == image.size());
  CHECK(std::equal(image.begin(), image.end(), buf.begin()));
  s.w[0] = 42.0f;  // the next snapshot goes into the same buffer
  CHECK(w.serialize_into(buf) == image.size());
  auto r = SafetensorsReader::from_bytes(Bytes(buf.begin(), buf.begin() + static_cast<long>(image.size())), "mem");
  float first = 0;
  std::memcpy(&first, r.bytes(r.at("0.weight")).data(), 4);
  CHECK(first == 42.0f);
  Bytes small(image.size() - 1);
  CHECK_THROWS_AS(w.serialize_into(small), rf::InvalidInput);
}

TEST_CASE("serialize_into's one pass (copy, then CRC and digest of each chunk) gives write_file's bytes") {
  // write_file checksums the caller's memory first and streams it after; serialize_into
  // copies 256 KiB chunks and checksums the copies. Tensors of several chunks, sizes that
  // are not a multiple of the chunk or of XXH3's 64-byte stripe, and an empty one.
  std::vector<float> big(3 * 65536 + 777);  // 3 chunks and a bit
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 1013) * 0.5f;
  std::vector<float> odd(9, 1.25f);
  std::vector<int64_t> count{7};
  SafetensorsWriter w;
  w.add("big", DType::F32, {static_cast<int64_t>(big.size())}, big.data());
  w.add("odd", DType::F32, {3, 3}, odd.data());
  w.add("none", DType::F32, {0, 4}, nullptr);
  w.add("count", DType::I64, {}, count.data());
  w.set_metadata("step", "5");
  char tmpl[] = "/tmp/rf_ckpt_test_XXXXXX";
  REQUIRE(mkdtemp(tmpl));
  const std::string path = std::string(tmpl) + "/a.safetensors";
  w.write_file(path);
  const Bytes file = read_file_bytes(path);
  std::filesystem::remove_all(tmpl);
  Bytes image(w.serialized_size());
  REQUIRE(w.serialize_into(image) == image.size());
  CHECK(image == file);
  auto r = SafetensorsReader::borrow(image, "mem", {.verify_integrity = true, .require_integrity = true});
  CHECK(r.state_digest() == w.state_digest());
}

TEST_CASE("layout: header padded to 8 bytes, wider dtypes first so every tensor is aligned") {
  st_test::SampleState s;
  Bytes bytes = s.writer().to_bytes();
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  CHECK(n % 8 == 0);
  auto r = SafetensorsReader::from_bytes(bytes, "mem");
  for (const auto& t : r.tensors()) CHECK((r.tensors().front().begin + t.begin) % dtype_size(t.dtype) == 0);
  // 8-byte types first, in the order added, then the 4-byte ones.
  CHECK(r.tensors()[0].name == "opt.momentum");
  CHECK(r.tensors()[1].name == "steps");
  CHECK(r.tensors()[2].name == "counters");
  CHECK(r.tensors()[3].name == "0.weight");
  CHECK(r.tensors()[4].name == "0.bias");
}

TEST_CASE("round trip through a file, and a file equals the byte image") {
  st_test::SampleState s;
  char tmpl[] = "/tmp/rf_ckpt_test_XXXXXX";
  REQUIRE(mkdtemp(tmpl));
  const std::string path = std::string(tmpl) + "/a.safetensors";
  auto w = s.writer();
  w.write_file(path);
  auto r = SafetensorsReader::open(path);
  CHECK(r.source() == path);
  CHECK(read_vec<double>(r, "opt.momentum", DType::F64) == s.m);
  CHECK(std::filesystem::file_size(path) == w.to_bytes().size());
  std::filesystem::remove_all(tmpl);
  try {
    SafetensorsReader::open(path);
    FAIL("a missing file must throw");
  } catch (const FormatError& e) {
    CHECK(st_test::has(e.what(), path));
    CHECK(st_test::has(e.what(), "cannot open"));
  }
  CHECK_THROWS_AS(w.write_file("/nonexistent-dir/x.safetensors"), rf::Error);
}

TEST_CASE("empty state, zero-sized tensors and metadata-only files round trip") {
  SafetensorsWriter w;
  w.set_metadata("k", "v");
  auto r = SafetensorsReader::from_bytes(w.to_bytes(), "mem");
  CHECK(r.tensors().empty());
  CHECK(r.metadata().at("k") == "v");

  SafetensorsWriter z;
  float one = 1.5f;
  z.add("empty", DType::F32, {0, 4}, nullptr);
  z.add("scalar", DType::F32, {}, &one);
  auto rz = SafetensorsReader::from_bytes(z.to_bytes(), "mem");
  CHECK(rz.at("empty").nbytes() == 0);
  CHECK(rz.at("scalar").shape.empty());
  float back = 0;
  rz.copy_to("scalar", DType::F32, std::span<const int64_t>{}, &back);
  CHECK(back == 1.5f);
}

TEST_CASE("the writer refuses bad entries and reserved metadata") {
  SafetensorsWriter w;
  float x = 0;
  w.add("a", DType::F32, {1}, &x);
  CHECK_THROWS_AS(w.add("a", DType::F32, {1}, &x), rf::InvalidInput);
  CHECK_THROWS_AS(w.add("", DType::F32, {1}, &x), rf::InvalidInput);
  CHECK_THROWS_AS(w.add("__metadata__", DType::F32, {1}, &x), rf::InvalidInput);
  CHECK_THROWS_AS(w.add("neg", DType::F32, {-1}, &x), rf::InvalidInput);
  CHECK_THROWS_AS(w.add("null", DType::F32, {2}, nullptr), rf::InvalidInput);
  CHECK_THROWS_AS(w.set_metadata("crc32c", "x"), rf::InvalidInput);
  CHECK_THROWS_AS(w.set_metadata("state_digest", "x"), rf::InvalidInput);
}

TEST_CASE("copy_to checks dtype and shape and names both") {
  st_test::SampleState s;
  auto r = SafetensorsReader::from_bytes(s.writer().to_bytes(), "init.safetensors");
  std::vector<float> dst(15);
  try {
    r.copy_to("0.weight", DType::F32, {3, 5}, dst.data());
    FAIL("wrong shape must throw");
  } catch (const MismatchError& e) {
    CHECK(std::string(e.what()) == "init.safetensors: tensor '0.weight': shape is [5, 3], expected [3, 5]");
  }
  try {
    r.copy_to("0.weight", DType::F64, {5, 3}, dst.data());
    FAIL("wrong dtype must throw");
  } catch (const MismatchError& e) {
    CHECK(e.tensor() == "0.weight");
    CHECK(e.problem() == "dtype is F32, expected F64");
  }
  CHECK_THROWS_AS(r.copy_to("nope", DType::F32, {1}, dst.data()), MismatchError);
}

TEST_CASE("snapshot metadata round trips and is validated") {
  st_test::SampleState s;
  auto w = s.writer();
  SnapshotMeta m;
  m.model = "mlp";
  m.step = 150;
  m.generation = 3;
  m.world_size = 4;
  m.optimizer = "sgd";
  m.optimizer_hparams = R"({"lr":0.05,"momentum":0.9})";
  write_snapshot_meta(w, m);
  auto r = SafetensorsReader::from_bytes(w.to_bytes(), "snap");
  SnapshotMeta back = read_snapshot_meta(r);
  CHECK(back.format_version == 1);
  CHECK(back.model == "mlp");
  CHECK(back.step == 150);
  CHECK(back.generation == 3);
  CHECK(back.world_size == 4);
  CHECK(back.optimizer == "sgd");
  CHECK(nlohmann::json::parse(back.optimizer_hparams)["momentum"] == 0.9);
  CHECK(back.data_order.empty());  // optional: not written, not read
  CHECK(back.job_id.empty());      // likewise
  {
    auto w3 = s.writer();
    SnapshotMeta j = m;
    j.job_id = "4f2c9e";
    write_snapshot_meta(w3, j);
    auto r3 = SafetensorsReader::from_bytes(w3.to_bytes(), "snap");
    CHECK(read_snapshot_meta(r3).job_id == "4f2c9e");
  }

  {
    auto w2 = s.writer();
    m.data_order = R"({"batch":128,"samples":60000,"seed":0})";
    write_snapshot_meta(w2, m);
    auto r2 = SafetensorsReader::from_bytes(w2.to_bytes(), "snap");
    CHECK(read_snapshot_meta(r2).data_order == m.data_order);
    const std::string not_an_object = "[7]";  // (a literal here trips GCC 12's -Wrestrict)
    m.data_order = not_an_object;
    CHECK_THROWS_AS(write_snapshot_meta(w2, m), rf::InvalidInput);
    m.data_order.clear();
  }

  m.optimizer_hparams = "[1]";
  CHECK_THROWS_AS(write_snapshot_meta(w, m), rf::InvalidInput);

  SafetensorsWriter bad;
  bad.set_metadata("format", "ringfence-snapshot");
  bad.set_metadata("format_version", "1");
  bad.set_metadata("model", "mlp");
  bad.set_metadata("step", "12x");
  auto rb = SafetensorsReader::from_bytes(bad.to_bytes(), "bad.safetensors");
  try {
    read_snapshot_meta(rb);
    FAIL("a non-numeric step must throw");
  } catch (const FormatError& e) {
    CHECK(std::string(e.what()) == "bad.safetensors: metadata 'step' is \"12x\", expected an integer");
  }
  bad.set_metadata("step", "12");
  auto rb2 = SafetensorsReader::from_bytes(bad.to_bytes(), "bad.safetensors");
  CHECK_THROWS_WITH_AS(read_snapshot_meta(rb2), "bad.safetensors: metadata 'generation' is missing", FormatError);
  bad.set_metadata("format_version", "2");
  auto rb3 = SafetensorsReader::from_bytes(bad.to_bytes(), "bad.safetensors");
  CHECK_THROWS_AS(read_snapshot_meta(rb3), FormatError);
}

TEST_CASE("files without our integrity metadata (e.g. written by PyTorch) are read; require_integrity refuses them") {
  const std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  Bytes f = st_test::raw_file(h, 8);
  auto r = SafetensorsReader::from_bytes(f, "torch.safetensors");
  CHECK_FALSE(r.has_integrity());
  CHECK(r.at("a").numel() == 2);
  CHECK_THROWS_AS(SafetensorsReader::from_bytes(f, "torch.safetensors", {.require_integrity = true}), FormatError);
}
