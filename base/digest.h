#pragma once
// StateDigest — a fast 128-bit non-cryptographic digest of a byte stream, used to prove
// that replicas hold identical state (docs/protocol.md R4, recovery steps 4, 6 and 7) and to
// compare runs bit for bit (`state_digest` in --metrics). It detects accidental
// divergence and corruption; it is not a defence against an adversary.
//
// It is XXH3-128 (libxxhash) of the concatenated bytes, never dependent on how they were
// split across update() calls: the digest of one buffer is what `xxh128sum` prints.
// Throughput: bench/RESULTS.md, "State digest throughput" (build/bin/digest_bench).
//
// Versions. A digest string is "<version>:<32 hex digits>", e.g. "x3:99aa06d3...": the
// version names the algorithm and its framing. Two digests of different versions say
// nothing about each other, so they are never compared: same_digest() throws
// DigestVersionError naming both versions. A digest without a prefix has version "none":
// the four-lane digest that x3 replaced, which this build cannot compute.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "base/error.h"

struct XXH3_state_s;  // libxxhash's streaming state (XXH3_state_t), kept out of this header

namespace rf {

// The version of the digests this build computes: XXH3-128, 32 hex digits after "x3:".
inline constexpr std::string_view kDigestVersion = "x3";
inline constexpr size_t kDigestChars = 35;  // StateDigest::hex().size()

// Two digests of different versions were to be compared, or a digest of another version
// than kDigestVersion was to be checked against this build's; what() names both versions.
class DigestVersionError : public InvalidInput {
 public:
  using InvalidInput::InvalidInput;
};

class StateDigest {
 public:
  StateDigest();
  StateDigest(const StateDigest& o);
  StateDigest& operator=(const StateDigest& o);
  StateDigest(StateDigest&&) noexcept = default;
  StateDigest& operator=(StateDigest&&) noexcept = default;
  ~StateDigest();

  void update(const void* data, size_t bytes);
  void update(std::span<const std::byte> bytes) { update(bytes.data(), bytes.size()); }
  // Convenience for framing: mixes a value (e.g. a length or a name) into the stream.
  void update_u64(uint64_t v);
  void update_str(const std::string& s);
  // "x3:" + 32 lowercase hex characters. Does not change the digest's state.
  std::string hex() const;
  std::array<uint64_t, 2> value() const;  // {high, low} 64 bits, in hex()'s order

 private:
  struct Free {
    void operator()(XXH3_state_s* s) const;
  };
  std::unique_ptr<XXH3_state_s, Free> s_;
};

// One-shot helper.
std::string digest_hex(const void* data, size_t bytes);

// The version of a digest string: the text before its ':', or "none" when it has none.
std::string_view digest_version(std::string_view digest);
// a == b for two digests of one version. Throws DigestVersionError, naming `what` and both
// versions, when their versions differ: digests of two versions are never compared.
bool same_digest(std::string_view a, std::string_view b, std::string_view what);
// Throws DigestVersionError naming `what` unless `digest` is of kDigestVersion, the only
// version this build can recompute and check.
void require_digest_version(std::string_view digest, std::string_view what);

}  // namespace rf
