#pragma once
// Generator — our own seeded random stream (SplitMix64), so a model built from the same
// seed is bit-identical on every rank and platform. std::uniform_real_distribution is not
// used: its output is implementation-defined.
#include <cstdint>

namespace rf {

class Generator {
 public:
  explicit Generator(uint64_t seed) : state_(seed) {}
  uint64_t next_u64() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 24 random bits (every value exactly representable in float).
  float uniform01() { return static_cast<float>(next_u64() >> 40) * (1.0f / 16777216.0f); }
  // Uniform in [lo, hi), computed in double and rounded once.
  float uniform(float lo, float hi) {
    const double u = static_cast<double>(next_u64() >> 40) * (1.0 / 16777216.0);
    return static_cast<float>(static_cast<double>(lo) + (static_cast<double>(hi) - lo) * u);
  }

 private:
  uint64_t state_;
};

}  // namespace rf
