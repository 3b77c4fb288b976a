#pragma once
// The four-lane digest, ringfence's own (digest version "none": its strings carry no
// prefix), copied here as digest_bench's baseline against XXH3-128.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace rf::bench {

class FourLaneDigest {
 public:
  void update(const void* data, size_t bytes) {
    if (bytes == 0) return;
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

  std::array<uint64_t, 2> value() const {
    uint64_t h = rotl(lanes_[0], 1) + rotl(lanes_[1], 7) + rotl(lanes_[2], 12) + rotl(lanes_[3], 18);
    h ^= total_ * kP3;
    for (size_t i = 0; i < tail_len_; ++i) h = rotl(h ^ (tail_[i] * kP3), 11) * kP1;
    return {fmix(h ^ lanes_[0] ^ lanes_[2]), fmix(h + kP2 + (lanes_[1] ^ lanes_[3]))};
  }

 private:
  static constexpr uint64_t kP1 = 0x9E3779B185EBCA87ULL;
  static constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4FULL;
  static constexpr uint64_t kP3 = 0x165667B19E3779F9ULL;
  static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
  static uint64_t load64(const unsigned char* p) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
  }
  static uint64_t round(uint64_t acc, uint64_t w) { return rotl(acc + w * kP2, 31) * kP1; }
  static uint64_t fmix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
  }
  void block(const unsigned char* p) {
    lanes_[0] = round(lanes_[0], load64(p));
    lanes_[1] = round(lanes_[1], load64(p + 8));
    lanes_[2] = round(lanes_[2], load64(p + 16));
    lanes_[3] = round(lanes_[3], load64(p + 24));
  }

  std::array<uint64_t, 4> lanes_{kP1 + kP2, kP2, 0, 0 - kP1};
  std::array<unsigned char, 32> tail_{};
  size_t tail_len_ = 0;
  uint64_t total_ = 0;
};

}  // namespace rf::bench
