#include "elastic/auth.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "base/error.h"
#include "base/str.h"
#include "elastic/errors.h"
#include "elastic/token.h"
#include "elastic/wire.h"

namespace rf::elastic {

namespace {

// HMAC-SHA256(key, message): its 32 bytes.
std::string hmac_sha256(const std::string& key, const std::string& message) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(message.data()),
           message.size(), mac, &len) == nullptr) {
    throw rf::Error("HMAC-SHA256 failed (OpenSSL)");
  }
  return std::string(reinterpret_cast<const char*>(mac), len);
}

}  // namespace

std::string hmac_sha256_hex(const std::string& key, const std::string& message) {
  return hex_encode(hmac_sha256(key, message));
}

std::string coordinator_proof(const std::string& token, const std::string& client_nonce,
                              const std::string& server_nonce) {
  return hmac_sha256_hex(token, rf::str("ringfence/1 coordinator|", client_nonce, "|", server_nonce));
}

std::string client_proof(const std::string& token, const std::string& server_nonce, const std::string& client_nonce,
                         const std::string& role, int slot, int64_t incarnation) {
  return hmac_sha256_hex(token, rf::str("ringfence/1 client|", server_nonce, "|", client_nonce, "|", role, "|", slot, "|",
                                        incarnation));
}

std::array<uint64_t, 2> data_plane_key(const std::string& token, const std::string& job_id, uint64_t generation) {
  const std::string mac = hmac_sha256(token, rf::str("ringfence/1 data-plane|", job_id, "|", generation));
  std::array<uint64_t, 2> k{};
  for (int w = 0; w < 2; ++w)
    for (int i = 0; i < 8; ++i) k[w] |= static_cast<uint64_t>(static_cast<unsigned char>(mac[8 * w + i])) << (8 * i);
  return k;
}

nlohmann::json authenticate(Connection& c, const std::string& token, nlohmann::json hello, TimePoint deadline,
                            TimePoint* auth_sent) {
  const std::string mine = random_token();
  hello["nonce"] = mine;
  const nlohmann::json challenge = c.call(hello, deadline);
  if (challenge.value("type", "") != "challenge" || !challenge.contains("nonce") || !challenge["nonce"].is_string() ||
      !challenge.contains("proof") || !challenge["proof"].is_string()) {
    throw ProtocolError(rf::str("the coordinator answered hello with '", challenge.value("type", "?"),
                                "', not a challenge"));
  }
  const std::string theirs = challenge["nonce"];
  if (!token_equal(challenge["proof"].get<std::string>(), coordinator_proof(token, mine, theirs))) {
    c.close();
    throw Refused("wrong job token: the coordinator's proof does not match this token (the token given here is not "
                  "the job's, or the coordinator is not this job's)");
  }
  const std::string role = hello.value("role", "");
  const int slot = hello.value("slot", -1);
  const int64_t inc = hello.value("incarnation", int64_t{0});
  if (auth_sent) *auth_sent = Clock::now();  // read before the auth leaves: never later
  return c.call({{"type", "auth"}, {"mac", client_proof(token, theirs, mine, role, slot, inc)}}, deadline);
}

}  // namespace rf::elastic
