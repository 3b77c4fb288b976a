// The data plane's keys: SipHash-2-4 (base/siphash.h) against OpenSSL's SIPHASH, and the
// per-generation key of comm's tags (elastic/auth.h data_plane_key, comm/tag.h TagKey).
#include <doctest/doctest.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <cstring>
#include <set>
#include <vector>

#include "base/siphash.h"
#include "elastic/auth.h"

using namespace rf;

namespace {

// OpenSSL's SipHash-2-4 with a 64-bit output, as a little-endian word.
uint64_t openssl_siphash(const unsigned char key[16], const unsigned char* data, size_t n) {
  EVP_MAC* mac = EVP_MAC_fetch(nullptr, "SIPHASH", nullptr);
  REQUIRE(mac != nullptr);
  EVP_MAC_CTX* ctx = EVP_MAC_CTX_new(mac);
  size_t size = 8;
  OSSL_PARAM params[] = {OSSL_PARAM_construct_size_t(OSSL_MAC_PARAM_SIZE, &size), OSSL_PARAM_construct_end()};
  REQUIRE(EVP_MAC_init(ctx, key, 16, params) == 1);
  REQUIRE(EVP_MAC_update(ctx, data, n) == 1);
  unsigned char out[16];
  size_t len = 0;
  REQUIRE(EVP_MAC_final(ctx, out, &len, sizeof out) == 1);
  REQUIRE(len == 8);
  EVP_MAC_CTX_free(ctx);
  EVP_MAC_free(mac);
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(out[i]) << (8 * i);
  return v;
}

SipKey key_of(const unsigned char k[16]) {
  SipKey s;
  for (int i = 0; i < 8; ++i) s.k0 |= static_cast<uint64_t>(k[i]) << (8 * i);
  for (int i = 0; i < 8; ++i) s.k1 |= static_cast<uint64_t>(k[8 + i]) << (8 * i);
  return s;
}

}  // namespace

TEST_CASE("siphash24 equals OpenSSL's SIPHASH for every length from 0 to 64 bytes and several keys") {
  unsigned char data[64];
  for (int i = 0; i < 64; ++i) data[i] = static_cast<unsigned char>(i);
  for (int k = 0; k < 3; ++k) {
    unsigned char key[16];
    for (int i = 0; i < 16; ++i) key[i] = static_cast<unsigned char>(k == 0 ? i : (i * 37 + k * 101) & 0xff);
    for (size_t n = 0; n <= 64; ++n) {
      CAPTURE(k);
      CAPTURE(n);
      CHECK(siphash24(key_of(key), data, n) == openssl_siphash(key, data, n));
    }
  }
  // The paper's vector: key 00..0f, message 00..0e.
  unsigned char key[16];
  for (int i = 0; i < 16; ++i) key[i] = static_cast<unsigned char>(i);
  CHECK(siphash24(key_of(key), data, 15) == 0xa129ca6149be45e5ULL);
}

TEST_CASE("siphash24_u64 is the hash of the value's 8 little-endian bytes") {
  const SipKey k{0x0706050403020100ULL, 0x0f0e0d0c0b0a0908ULL};
  for (uint64_t v : std::vector<uint64_t>{0, 1, 0x0123456789abcdefULL, ~uint64_t{0}}) {
    unsigned char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
    CHECK(siphash24_u64(k, v) == siphash24(k, b, 8));
  }
}

TEST_CASE("data_plane_key: one key per token, job and generation, the same on every member") {
  const auto a = elastic::data_plane_key("token-a", "job-1", 7);
  CHECK(a == elastic::data_plane_key("token-a", "job-1", 7));
  std::set<std::array<uint64_t, 2>> keys{a, elastic::data_plane_key("token-b", "job-1", 7),
                                         elastic::data_plane_key("token-a", "job-2", 7),
                                         elastic::data_plane_key("token-a", "job-1", 8)};
  CHECK(keys.size() == 4);
}
