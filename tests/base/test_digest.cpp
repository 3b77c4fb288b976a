#include <doctest/doctest.h>

#include <random>
#include <utility>
#include <vector>

#include <xxhash.h>

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
  CHECK(base.size() == rf::kDigestChars);
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

TEST_CASE("the digest is XXH3-128 of the bytes, as xxh128sum prints it, after the version") {
  CHECK(rf::digest_hex(nullptr, 0) == "x3:99aa06d3014798d86001c324468d497f");
  std::mt19937 gen(11);
  std::vector<unsigned char> data(100'003);
  for (auto& b : data) b = static_cast<unsigned char>(gen());
  const XXH128_hash_t h = XXH3_128bits(data.data(), data.size());
  rf::StateDigest d;
  d.update(data.data(), data.size());
  CHECK(d.value() == std::array<uint64_t, 2>{h.high64, h.low64});
  const rf::StateDigest copy = d;  // copies carry on from the same state
  CHECK(copy.hex() == d.hex());
  rf::StateDigest moved = std::move(d);
  d = copy;  // a moved-from digest can be assigned to
  CHECK(d.hex() == moved.hex());
}

TEST_CASE("digests of two versions are never compared") {
  const std::string x3 = rf::digest_hex("a", 1);
  const std::string x3_other = rf::digest_hex("b", 1);
  const std::string unversioned = x3.substr(3);  // what a file written before versions holds
  CHECK(rf::digest_version(x3) == "x3");
  CHECK(rf::digest_version(unversioned) == "none");
  CHECK(rf::digest_version("x9:00") == "x9");
  CHECK(rf::same_digest(x3, x3, "test"));
  CHECK_FALSE(rf::same_digest(x3, x3_other, "test"));
  CHECK_FALSE(rf::same_digest(unversioned, unversioned.substr(1) + "0", "test"));  // one version: compared
  try {
    rf::same_digest(x3, unversioned, "rank 0 against rank 1");
    FAIL("compared across versions");
  } catch (const rf::DigestVersionError& e) {
    const std::string m = e.what();
    CHECK(m.find("rank 0 against rank 1") != std::string::npos);
    CHECK(m.find("'x3'") != std::string::npos);
    CHECK(m.find("'none'") != std::string::npos);
  }
  CHECK_NOTHROW(rf::require_digest_version(x3, "test"));
  CHECK_THROWS_AS(rf::require_digest_version(unversioned, "test"), rf::DigestVersionError);
  CHECK_THROWS_AS(rf::require_digest_version("x9:" + unversioned, "test"), rf::DigestVersionError);
}
