#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "ckpt/crc32c.h"

using rf::ckpt::crc32c;

namespace {
uint32_t bitwise_crc32c(const unsigned char* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int b = 0; b < 8; ++b) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}
}  // namespace

TEST_CASE("crc32c matches the known check values") {
  CHECK(crc32c("123456789", 9) == 0xE3069283u);
  CHECK(crc32c("", 0) == 0u);
  // RFC 3720 (iSCSI), appendix B.4.
  std::vector<unsigned char> buf(32, 0x00);
  CHECK(crc32c(buf.data(), buf.size()) == 0x8A9136AAu);
  std::fill(buf.begin(), buf.end(), 0xFF);
  CHECK(crc32c(buf.data(), buf.size()) == 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) buf[static_cast<size_t>(i)] = static_cast<unsigned char>(i);
  CHECK(crc32c(buf.data(), buf.size()) == 0x46DD794Eu);
  for (int i = 0; i < 32; ++i) buf[static_cast<size_t>(i)] = static_cast<unsigned char>(31 - i);
  CHECK(crc32c(buf.data(), buf.size()) == 0x113FDB5Cu);
}

TEST_CASE("hardware and slice-by-8 equal the bitwise definition at every length and alignment, and chain") {
  const std::string how = rf::ckpt::crc32c_is_hardware() ? "the SSE4.2 instruction" : "the tables";
  MESSAGE("crc32c uses " << how);
  std::vector<unsigned char> data(300);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 131 + 7);
  for (auto f : {&rf::ckpt::crc32c, &rf::ckpt::crc32c_software}) {
    for (size_t start = 0; start < 9; ++start) {
      for (size_t len = 0; start + len <= data.size(); len += 13) {
        REQUIRE(f(data.data() + start, len, 0) == bitwise_crc32c(data.data() + start, len));
      }
    }
    for (size_t cut = 0; cut <= data.size(); cut += 17) {
      CHECK(f(data.data() + cut, data.size() - cut, f(data.data(), cut, 0)) == f(data.data(), data.size(), 0));
    }
  }
  CHECK(rf::ckpt::crc32c_software("123456789", 9) == 0xE3069283u);
}

TEST_CASE("crc32c's three interleaved chains (inputs of 12 KiB and more) equal the tables") {
  // Above 3 x 4096 bytes the hardware path runs three chains and combines them through the
  // zero-shift tables; lengths around the block boundaries, misaligned starts and chaining
  // through a running CRC must all give the single-chain software value.
  std::vector<unsigned char> data(5 * 12288 + 100);
  uint64_t x = 88172645463325252ull;
  for (auto& b : data) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b = static_cast<unsigned char>(x);
  }
  for (size_t start : {size_t{0}, size_t{1}, size_t{7}}) {
    for (size_t len : {size_t{12287}, size_t{12288}, size_t{12289}, size_t{24576 + 5}, size_t{5 * 12288}}) {
      CAPTURE(start);
      CAPTURE(len);
      REQUIRE(crc32c(data.data() + start, len) == rf::ckpt::crc32c_software(data.data() + start, len));
      const uint32_t head = crc32c(data.data() + start, 13);
      CHECK(crc32c(data.data() + start + 13, len - 13, head) == rf::ckpt::crc32c_software(data.data() + start, len));
    }
  }
  CHECK(crc32c(data.data(), 300) == bitwise_crc32c(data.data(), 300));
  CHECK(crc32c(data.data(), 12288 * 2) == bitwise_crc32c(data.data(), 12288 * 2));
}
