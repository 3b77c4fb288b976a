#pragma once
// SplitMix64 — a tiny, fast, well-mixed 64-bit generator (Steele, Lea, Flood 2014). We use
// our own generator and our own range reduction because std::shuffle and the std
// distributions are implementation-defined: the batches of step s must be the same on
// every platform and every standard library (docs/protocol.md R3).
#include <cstdint>

namespace rf::data {

inline uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t next() {
    state_ += 0x9E3779B97F4A7C15ULL;
    return splitmix64_mix(state_);
  }

  // Uniform in [0, bound), bound >= 1, without modulo bias: values below 2^64 mod bound
  // are rejected so every residue is equally likely.
  uint64_t below(uint64_t bound) {
    const uint64_t threshold = (0 - bound) % bound;
    for (;;) {
      uint64_t r = next();
      if (r >= threshold) return r % bound;
    }
  }

  // Uniform float in [0, 1) from the top 24 bits (exactly representable).
  float uniform01() { return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f); }

 private:
  uint64_t state_;
};

// A generator for a sub-stream (e.g. one epoch) of a seeded stream: the two keys are mixed
// so that nearby (seed, key) pairs give unrelated streams.
inline SplitMix64 substream(uint64_t seed, uint64_t key) {
  return SplitMix64(splitmix64_mix(seed ^ 0x243F6A8885A308D3ULL) ^
                    splitmix64_mix(key + 0x13198A2E03707344ULL));
}

}  // namespace rf::data
