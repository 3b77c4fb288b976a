#include "base/digest.h"

#include <algorithm>
#include <cstring>

namespace rf {
namespace {

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t kP3 = 0x165667B19E3779F9ULL;

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

inline uint64_t load64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);  // little-endian hosts only (x86-64, aarch64)
  return v;
}

inline uint64_t round(uint64_t acc, uint64_t w) { return rotl(acc + w * kP2, 31) * kP1; }

inline uint64_t fmix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return k;
}

}  // namespace

StateDigest::StateDigest() : lanes_{kP1 + kP2, kP2, 0, 0 - kP1} {}

void StateDigest::block(const unsigned char* p) {
  lanes_[0] = round(lanes_[0], load64(p));
  lanes_[1] = round(lanes_[1], load64(p + 8));
  lanes_[2] = round(lanes_[2], load64(p + 16));
  lanes_[3] = round(lanes_[3], load64(p + 24));
}

void StateDigest::update(const void* data, size_t bytes) {
  if (bytes == 0) return;  // data may be null for an empty tensor; memcpy(null) is UB
  auto p = static_cast<const unsigned char*>(data);
  total_ += bytes;
  if (tail_len_ > 0) {
    size_t take = std::min(bytes, 32 - tail_len_);
    std::memcpy(tail_.data() + tail_len_, p, take);
    tail_len_ += take;
    p += take;
    bytes -= take;
    if (tail_len_ < 32) return;
    block(tail_.data());
    tail_len_ = 0;
  }
  while (bytes >= 32) {
    block(p);
    p += 32;
    bytes -= 32;
  }
  if (bytes > 0) {
    std::memcpy(tail_.data(), p, bytes);
    tail_len_ = bytes;
  }
}

void StateDigest::update_u64(uint64_t v) {
  unsigned char b[8];
  std::memcpy(b, &v, 8);
  update(b, 8);
}

void StateDigest::update_str(const std::string& s) {
  update_u64(s.size());
  update(s.data(), s.size());
}

std::array<uint64_t, 2> StateDigest::value() const {
  uint64_t h = rotl(lanes_[0], 1) + rotl(lanes_[1], 7) + rotl(lanes_[2], 12) + rotl(lanes_[3], 18);
  h ^= total_ * kP3;
  for (size_t i = 0; i < tail_len_; ++i) h = rotl(h ^ (tail_[i] * kP3), 11) * kP1;
  uint64_t a = fmix(h ^ lanes_[0] ^ lanes_[2]);
  uint64_t b = fmix(h + kP2 + (lanes_[1] ^ lanes_[3]));
  return {a, b};
}

std::string StateDigest::hex() const {
  static const char* digits = "0123456789abcdef";
  auto v = value();
  std::string out(32, '0');
  for (int w = 0; w < 2; ++w)
    for (int i = 0; i < 16; ++i) out[w * 16 + i] = digits[(v[w] >> (60 - 4 * i)) & 0xF];
  return out;
}

std::string digest_hex(const void* data, size_t bytes) {
  StateDigest d;
  d.update(data, bytes);
  return d.hex();
}

}  // namespace rf
