#pragma once
// SipHash-2-4 (Aumasson and Bernstein, 2012): a keyed pseudo-random function of a short
// message, 64 bits out, under a 128-bit key. Used where a value must be unguessable
// without a secret but cheap to compute per message: comm's keyed tags (comm/tag.h).
// Written from the paper; checked against OpenSSL's SIPHASH (tests/comm/test_tag.cpp).
// Our own because OpenSSL's EVP_MAC costs microseconds per call and a tag is 8 bytes.
#include <cstddef>
#include <cstdint>

namespace rf {

struct SipKey {
  uint64_t k0 = 0, k1 = 0;  // the key's bytes 0..7 and 8..15, little-endian
};

uint64_t siphash24(const SipKey& key, const void* data, size_t bytes);
// The 8 bytes of `v` in little-endian order (the hash of one 64-bit value).
uint64_t siphash24_u64(const SipKey& key, uint64_t v);

}  // namespace rf
