#include "base/digest.h"

#include <cstring>

#if defined(__x86_64__)
// XXH3_128bits_update becomes libxxhash's run-time dispatch (SSE2 / AVX2 / AVX-512): the
// fastest variant measured (bench/RESULTS.md), whatever this build's -march.
#include <xxh_x86dispatch.h>
#endif
#include <xxhash.h>

#include "base/enforce.h"
#include "base/str.h"

namespace rf {

void StateDigest::Free::operator()(XXH3_state_s* s) const { XXH3_freeState(s); }

namespace {
XXH3_state_t* new_xxh3_state() {
  XXH3_state_t* x = XXH3_createState();
  RF_ENFORCE(x != nullptr, "XXH3_createState: out of memory");
  return x;
}
}  // namespace

StateDigest::StateDigest() : s_(new_xxh3_state()) { XXH3_128bits_reset(s_.get()); }

StateDigest::StateDigest(const StateDigest& o) : s_(new_xxh3_state()) { XXH3_copyState(s_.get(), o.s_.get()); }

StateDigest& StateDigest::operator=(const StateDigest& o) {
  if (this == &o) return *this;
  if (!s_) s_.reset(new_xxh3_state());  // assigned to after a move
  XXH3_copyState(s_.get(), o.s_.get());
  return *this;
}

StateDigest::~StateDigest() = default;

void StateDigest::update(const void* data, size_t bytes) {
  if (bytes == 0) return;  // data may be null for an empty tensor
  XXH3_128bits_update(s_.get(), data, bytes);
}

void StateDigest::update_u64(uint64_t v) {
  unsigned char b[8];
  std::memcpy(b, &v, 8);  // little-endian hosts only (x86-64, aarch64)
  update(b, 8);
}

void StateDigest::update_str(const std::string& s) {
  update_u64(s.size());
  update(s.data(), s.size());
}

std::array<uint64_t, 2> StateDigest::value() const {
  const XXH128_hash_t h = XXH3_128bits_digest(s_.get());
  return {h.high64, h.low64};
}

std::string StateDigest::hex() const {
  static const char* digits = "0123456789abcdef";
  auto v = value();
  std::string out = std::string(kDigestVersion) + ":" + std::string(32, '0');
  const size_t at = kDigestVersion.size() + 1;
  for (int w = 0; w < 2; ++w)
    for (int i = 0; i < 16; ++i) out[at + w * 16 + i] = digits[(v[w] >> (60 - 4 * i)) & 0xF];
  return out;
}

std::string digest_hex(const void* data, size_t bytes) {
  StateDigest d;
  d.update(data, bytes);
  return d.hex();
}

std::string_view digest_version(std::string_view digest) {
  const size_t colon = digest.find(':');
  return colon == std::string_view::npos ? std::string_view("none") : digest.substr(0, colon);
}

namespace {
std::string describe(std::string_view version) {
  if (version == kDigestVersion) return str("'", version, "' (XXH3-128)");
  if (version == "none") return "'none' (no version prefix: the four-lane digest that x3 replaced)";
  return str("'", version, "' (unknown to this build)");
}
}  // namespace

bool same_digest(std::string_view a, std::string_view b, std::string_view what) {
  const std::string_view va = digest_version(a), vb = digest_version(b);
  if (va != vb)
    throw DigestVersionError(str(what, ": digests of two versions, ", describe(va), " and ", describe(vb),
                                 ", cannot be compared (", a, " vs ", b, ")"));
  return a == b;
}

void require_digest_version(std::string_view digest, std::string_view what) {
  const std::string_view v = digest_version(digest);
  if (v != kDigestVersion)
    throw DigestVersionError(str(what, ": digest ", digest, " is of version ", describe(v), "; this build computes ",
                                 describe(kDigestVersion), " and cannot check it"));
}

}  // namespace rf
