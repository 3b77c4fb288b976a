#include <doctest/doctest.h>
#include <zlib.h>

#include <cstdio>
#include <string>
#include <vector>

#include "core/data/data.h"
#include "temp_dir.h"

using rf::data::DataError;
using Bytes = std::vector<unsigned char>;

namespace {

Bytes idx_header(unsigned char type, std::vector<uint32_t> dims) {
  Bytes b = {0, 0, type, static_cast<unsigned char>(dims.size())};
  for (uint32_t d : dims) {
    b.push_back(static_cast<unsigned char>(d >> 24));
    b.push_back(static_cast<unsigned char>(d >> 16));
    b.push_back(static_cast<unsigned char>(d >> 8));
    b.push_back(static_cast<unsigned char>(d));
  }
  return b;
}

Bytes images_file(uint32_t n, uint32_t h, uint32_t w) {
  Bytes b = idx_header(0x08, {n, h, w});
  for (uint32_t i = 0; i < n * h * w; ++i) b.push_back(static_cast<unsigned char>(i * 7));
  return b;
}

Bytes labels_file(std::vector<unsigned char> labels) {
  Bytes b = idx_header(0x08, {static_cast<uint32_t>(labels.size())});
  b.insert(b.end(), labels.begin(), labels.end());
  return b;
}

void write_plain(const std::string& path, const Bytes& b) {
  FILE* f = std::fopen(path.c_str(), "wb");
  REQUIRE(f);
  REQUIRE(std::fwrite(b.data(), 1, b.size(), f) == b.size());
  std::fclose(f);
}

Bytes gzip_bytes(const Bytes& b) {
  uLongf cap = compressBound(static_cast<uLong>(b.size())) + 64;
  Bytes out(cap);
  z_stream zs{};
  REQUIRE(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16 /* gzip wrapper */, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  zs.next_in = const_cast<unsigned char*>(b.data());
  zs.avail_in = static_cast<uInt>(b.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&zs, Z_FINISH) == Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

// Runs `fn`, requires a DataError, and returns its message.
template <typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const DataError& e) {
    return e.what();
  }
  FAIL("expected a DataError");
  return {};
}

bool contains(const std::string& s, const std::string& part) {
  if (s.find(part) != std::string::npos) return true;
  MESSAGE("message was: ", s, " (expected to contain: ", part, ")");
  return false;
}

}  // namespace

TEST_CASE("IDX: plain and gzip files give the same array") {
  TempDir dir;
  const Bytes img = images_file(3, 4, 5);
  write_plain(dir.file("a"), img);
  write_plain(dir.file("a.gz"), gzip_bytes(img));
  auto plain = rf::data::read_idx_u8(dir.file("a"), 3);
  auto gz = rf::data::read_idx_u8(dir.file("a.gz"), 3);
  CHECK(plain.dims == std::vector<int64_t>{3, 4, 5});
  CHECK(gz.dims == plain.dims);
  CHECK(gz.data == plain.data);
  REQUIRE(plain.data.size() == 60);
  CHECK(plain.data[59] == static_cast<unsigned char>(59 * 7));
}

TEST_CASE("IDX: each malformed file gives its own clear error naming the file") {
  TempDir dir;
  const std::string p = dir.file("bad-images");
  auto read3 = [&] { rf::data::read_idx_u8(p, 3); };

  std::string m = error_of([&] { rf::data::read_idx_u8(dir.file("absent"), 3); });
  CHECK(contains(m, "absent"));
  CHECK(contains(m, "not found"));

  write_plain(p, {0, 0});
  m = error_of(read3);
  CHECK(contains(m, p));
  CHECK(contains(m, "truncated"));
  CHECK(contains(m, "magic"));

  Bytes b = images_file(2, 2, 2);
  b[0] = 0x1f;
  write_plain(p, b);
  CHECK(contains(error_of(read3), "bad magic"));

  b = images_file(2, 2, 2);
  b[2] = 0x0D;  // float data
  write_plain(p, b);
  CHECK(contains(error_of(read3), "unsupported data type 0xd"));

  write_plain(p, labels_file({1, 2}));
  m = error_of(read3);
  CHECK(contains(m, "wrong number of dimensions 1"));
  CHECK(contains(m, "byte offset 3"));

  b = idx_header(0x08, {2, 0, 2});
  write_plain(p, b);
  CHECK(contains(error_of(read3), "dimension 1 (byte offset 8) is 0"));

  b = idx_header(0x08, {0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF});
  write_plain(p, b);
  CHECK(contains(error_of(read3), "dimensions too large"));

  b = images_file(2, 2, 2);
  b.resize(10);  // cut inside the second dimension
  write_plain(p, b);
  m = error_of(read3);
  CHECK(contains(m, "truncated: a dimension needs 4 bytes at byte offset 8"));

  b = images_file(2, 2, 2);
  b.pop_back();
  write_plain(p, b);
  CHECK(contains(error_of(read3), "truncated: the data needs 8 bytes at byte offset 16 but the file ends after 7"));

  b = images_file(2, 2, 2);
  b.push_back(0);
  write_plain(p, b);
  CHECK(contains(error_of(read3), "trailing bytes after the data at byte offset 24"));
}

TEST_CASE("IDX: damaged gzip streams are reported, not read as short data") {
  TempDir dir;
  const std::string p = dir.file("img.gz");
  const Bytes gz = gzip_bytes(images_file(20, 10, 10));
  // Cut the compressed stream at several places.
  for (size_t cut : {size_t{12}, gz.size() / 2, gz.size() - 5}) {
    write_plain(p, Bytes(gz.begin(), gz.begin() + static_cast<long>(cut)));
    std::string m = error_of([&] { rf::data::read_idx_u8(p, 3); });
    CHECK(contains(m, p));
    CHECK(contains(m, "truncated"));
  }
  // How far it got is the decompressed bytes read before the cut, not the offset of the
  // field being read (it said "after 16 decompressed bytes" for a file cut in half).
  {
    const Bytes big = images_file(64, 28, 28);  // 50,192 bytes: the cut falls inside the data
    Bytes half = gzip_bytes(big);
    half.resize(half.size() / 2);
    write_plain(p, half);
    const std::string m = error_of([&] { rf::data::read_idx_u8(p, 3); });
    const size_t at = m.find("(after ");
    REQUIRE_MESSAGE(at != std::string::npos, m);
    const long long got = std::stoll(m.substr(at + 7));
    CAPTURE(m);
    CHECK(got > 16);
    CHECK(got < static_cast<long long>(big.size()));
  }
  // Corrupt the deflate data itself (after the 10-byte gzip header).
  Bytes bad = gz;
  for (size_t i = 12; i < 40 && i < bad.size(); ++i) bad[i] ^= 0xA5;
  write_plain(p, bad);
  std::string m = error_of([&] { rf::data::read_idx_u8(p, 3); });
  CHECK(contains(m, p));
}

TEST_CASE("Fashion-MNIST loader: count mismatch and labels out of range") {
  TempDir dir;
  write_plain(dir.file("train-images-idx3-ubyte"), images_file(3, 2, 2));
  write_plain(dir.file("train-labels-idx1-ubyte"), labels_file({1, 2}));
  std::string m = error_of([&] { rf::data::load_fashion_mnist(dir.path.string(), rf::data::Split::Train); });
  CHECK(contains(m, "label count 2 does not match the image count 3"));

  write_plain(dir.file("train-labels-idx1-ubyte"), labels_file({1, 10, 2}));
  m = error_of([&] { rf::data::load_fashion_mnist(dir.path.string(), rf::data::Split::Train); });
  CHECK(contains(m, "train-labels-idx1-ubyte: label 10 of sample 1 (byte offset 9) is out of range [0, 10)"));

  write_plain(dir.file("train-labels-idx1-ubyte"), labels_file({1, 9, 2}));
  auto ds = rf::data::load_fashion_mnist(dir.path.string(), rf::data::Split::Train);
  CHECK(ds.n == 3);
  CHECK(ds.labels == std::vector<int32_t>{1, 9, 2});
  // Pixel 1 of sample 0 is 7: normalised as (7/255 - 0.2860) / 0.3530.
  CHECK(ds.images[1] == doctest::Approx((7.0 / 255 - 0.2860) / 0.3530).epsilon(1e-6));

  m = error_of([&] { rf::data::load_fashion_mnist(dir.path.string(), rf::data::Split::Test); });
  CHECK(contains(m, "t10k-images-idx3-ubyte.gz: file not found"));
}
