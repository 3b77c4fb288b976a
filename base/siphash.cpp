#include "base/siphash.h"

#include <cstring>

namespace rf {

namespace {

inline uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

struct State {
  uint64_t v0, v1, v2, v3;
  explicit State(const SipKey& k)
      : v0(k.k0 ^ 0x736f6d6570736575ULL),
        v1(k.k1 ^ 0x646f72616e646f6dULL),
        v2(k.k0 ^ 0x6c7967656e657261ULL),
        v3(k.k1 ^ 0x7465646279746573ULL) {}
  void round() {
    v0 += v1; v1 = rotl(v1, 13); v1 ^= v0; v0 = rotl(v0, 32);
    v2 += v3; v3 = rotl(v3, 16); v3 ^= v2;
    v0 += v3; v3 = rotl(v3, 21); v3 ^= v0;
    v2 += v1; v1 = rotl(v1, 17); v1 ^= v2; v2 = rotl(v2, 32);
  }
  void compress(uint64_t m) {  // c = 2 rounds per message word
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }
  uint64_t finish() {  // d = 4 rounds
    v2 ^= 0xff;
    round();
    round();
    round();
    round();
    return v0 ^ v1 ^ v2 ^ v3;
  }
};

inline uint64_t load_le(const unsigned char* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace

uint64_t siphash24(const SipKey& key, const void* data, size_t bytes) {
  State s(key);
  const auto* p = static_cast<const unsigned char*>(data);
  const size_t whole = bytes / 8 * 8;
  for (size_t i = 0; i < whole; i += 8) s.compress(load_le(p + i, 8));
  // The last word: the remaining bytes, and the message length's low byte on top.
  s.compress(load_le(p + whole, bytes - whole) | (static_cast<uint64_t>(bytes & 0xff) << 56));
  return s.finish();
}

uint64_t siphash24_u64(const SipKey& key, uint64_t v) {
  State s(key);
  s.compress(v);                   // one whole word (v's bytes in little-endian order)
  s.compress(uint64_t{8} << 56);   // no bytes left, length 8
  return s.finish();
}

}  // namespace rf
