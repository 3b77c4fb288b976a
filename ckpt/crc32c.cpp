#include "ckpt/crc32c.h"

#include <array>
#include <cstdio>
#include <cstring>

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#endif

namespace rf::ckpt {
namespace {

using Tables = std::array<std::array<uint32_t, 256>, 8>;

// Table k maps a byte to its CRC contribution when it is followed by k more bytes, so eight
// lookups fold eight bytes at once (slice-by-8).
constexpr Tables make_tables() {
  Tables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int b = 0; b < 8; ++b) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[0][i] = c;
  }
  for (size_t k = 1; k < 8; ++k) {
    for (uint32_t i = 0; i < 256; ++i) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
  }
  return t;
}

constexpr Tables kT = make_tables();

}  // namespace

uint32_t crc32c_software(const void* data, size_t bytes, uint32_t crc) {
  auto p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  while (bytes >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);  // little-endian load: byte 0 is the low byte
    w ^= crc;
    crc = kT[7][w & 0xFF] ^ kT[6][(w >> 8) & 0xFF] ^ kT[5][(w >> 16) & 0xFF] ^ kT[4][(w >> 24) & 0xFF] ^
          kT[3][(w >> 32) & 0xFF] ^ kT[2][(w >> 40) & 0xFF] ^ kT[1][(w >> 48) & 0xFF] ^ kT[0][w >> 56];
    p += 8;
    bytes -= 8;
  }
  while (bytes-- > 0) crc = kT[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

#if defined(__SSE4_2__)
namespace {

// Three independent chains, so the instruction's 3-cycle latency is hidden: the register
// is linear over GF(2) in (register, data) — no conditioning inside — so for blocks A, B, C
// of kLane bytes each, R(r, A B C) = Z(Z(R(r, A)) ^ R(0, B)) ^ R(0, C), where Z is the
// register after kLane zero bytes: a linear map of 32 bits, applied as four byte tables.
constexpr size_t kLane = 4096;

struct ZeroShift {
  std::array<std::array<uint32_t, 256>, 4> t{};
  ZeroShift() {
    std::array<uint32_t, 32> col{};  // Z of each single-bit register
    for (int j = 0; j < 32; ++j) {
      uint64_t c = uint64_t{1} << j;
      for (size_t i = 0; i < kLane; i += 8) c = _mm_crc32_u64(c, 0);
      col[static_cast<size_t>(j)] = static_cast<uint32_t>(c);
    }
    for (size_t b = 0; b < 4; ++b)
      for (uint32_t v = 0; v < 256; ++v) {
        uint32_t r = 0;
        for (size_t k = 0; k < 8; ++k)
          if ((v >> k) & 1) r ^= col[8 * b + k];
        t[b][v] = r;
      }
  }
  uint32_t operator()(uint32_t c) const { return t[0][c & 0xFF] ^ t[1][(c >> 8) & 0xFF] ^ t[2][(c >> 16) & 0xFF] ^ t[3][c >> 24]; }
};

}  // namespace
#endif

// x86's crc32 instruction computes exactly this polynomial (SSE4.2, always there with
// -march=native on the machines we build for): 8 bytes per cycle with three chains in
// flight (above), ~8 bytes per 3 cycles in one, several times the tables' rate either
// way. This matters because the checkpoint writer CRCs the whole state each time, on a
// core training wants too, and a recovery CRCs an image on both ends.
uint32_t crc32c(const void* data, size_t bytes, uint32_t crc) {
#if defined(__SSE4_2__)
  auto p = static_cast<const unsigned char*>(data);
  uint64_t c = ~crc;
  if (bytes >= 3 * kLane) {
    static const ZeroShift z;
    while (bytes >= 3 * kLane) {
      uint64_t c1 = 0, c2 = 0;
      for (size_t i = 0; i < kLane; i += 8) {
        uint64_t w0, w1, w2;
        std::memcpy(&w0, p + i, 8);
        std::memcpy(&w1, p + kLane + i, 8);
        std::memcpy(&w2, p + 2 * kLane + i, 8);
        c = _mm_crc32_u64(c, w0);
        c1 = _mm_crc32_u64(c1, w1);
        c2 = _mm_crc32_u64(c2, w2);
      }
      c = z(z(static_cast<uint32_t>(c)) ^ static_cast<uint32_t>(c1)) ^ static_cast<uint32_t>(c2);
      p += 3 * kLane;
      bytes -= 3 * kLane;
    }
  }
  while (bytes >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c = _mm_crc32_u64(c, w);
    p += 8;
    bytes -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (bytes-- > 0) c32 = _mm_crc32_u8(c32, *p++);
  return ~c32;
#else
  return crc32c_software(data, bytes, crc);
#endif
}

bool crc32c_is_hardware() {
#if defined(__SSE4_2__)
  return true;
#else
  return false;
#endif
}

std::string hex32(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

}  // namespace rf::ckpt
