#include <doctest/doctest.h>

#include <random>
#include <vector>

#include "base/digest.h"

TEST_CASE("digest does not depend on how the stream is split") {
  std::mt19937 gen(7);
  std::vector<unsigned char> data(1000);
  for (auto& b : data) b = static_cast<unsigned char>(gen());
  const std::string whole = rf::digest_hex(data.data(), data.size());
  for (size_t cut1 : {0, 1, 31, 32, 33, 500}) {
    for (size_t cut2 : {size_t{0}, size_t{7}, size_t{64}}) {
      size_t a = cut1, b = std::min(data.size(), cut1 + cut2);
      rf::StateDigest d;
      d.update(data.data(), a);
      d.update(data.data() + a, b - a);
      d.update(data.data() + b, data.size() - b);
      CHECK(d.hex() == whole);
    }
  }
}

TEST_CASE("digest changes when any single bit changes, and with length") {
  std::vector<unsigned char> data(97, 0x5a);
  const std::string base = rf::digest_hex(data.data(), data.size());
  CHECK(base.size() == 32);
  for (size_t i = 0; i < data.size(); ++i) {
    for (int bit : {0, 7}) {
      data[i] ^= static_cast<unsigned char>(1u << bit);
      CHECK(rf::digest_hex(data.data(), data.size()) != base);
      data[i] ^= static_cast<unsigned char>(1u << bit);
    }
  }
  CHECK(rf::digest_hex(data.data(), data.size() - 1) != base);
  CHECK(rf::digest_hex(data.data(), 0) != rf::digest_hex(data.data(), 1));
}
