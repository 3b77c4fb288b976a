#pragma once
// Admission to the coordinator by challenge and response: the job token never crosses the
// wire. Both sides prove they hold it, each over the other's fresh nonce:
//
//   client -> {"type":"hello", role, slot, incarnation, "nonce": Nc}
//   server -> {"type":"challenge", "nonce": Ns, "proof": HMAC(token, coordinator|Nc|Ns)}
//   client    checks the proof: a coordinator that does not hold the token is refused
//   client -> {"type":"auth", "mac": HMAC(token, client|Ns|Nc|role|slot|incarnation)}
//   server    checks the mac (in constant time), then answers the hello as before
//
// HMAC is HMAC-SHA256 (OpenSSL's libcrypto), hex-encoded. Nonces are 128 random bits, so a
// recorded exchange is worth nothing to a replay: the other side's nonce will differ. The
// client's mac binds what it asks to be (role, slot, incarnation): a stranger who saw one
// exchange cannot join as another worker.
#include <array>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "base/clock.h"

namespace rf::elastic {

class Connection;

// HMAC-SHA256(key, message) as 64 lowercase hex characters.
std::string hmac_sha256_hex(const std::string& key, const std::string& message);

std::string coordinator_proof(const std::string& token, const std::string& client_nonce,
                              const std::string& server_nonce);
std::string client_proof(const std::string& token, const std::string& server_nonce, const std::string& client_nonce,
                         const std::string& role, int slot, int64_t incarnation);

// The data plane's key for one generation of one job (comm/tag.h TagKey): the first 16
// bytes of HMAC(token, "ringfence/1 data-plane|job_id|generation"), as two little-endian
// words. Every member derives it from the token it already holds; nothing carries it.
std::array<uint64_t, 2> data_plane_key(const std::string& token, const std::string& job_id, uint64_t generation);

// The client's half over an open connection: `hello` (type, role, slot, incarnation) gets
// a fresh nonce, the challenge's proof is checked, the mac is sent, and the welcome is
// returned. Throws Refused when the coordinator's proof is wrong or it refuses the mac
// ("wrong job token"), and what Connection::call throws. `auth_sent`, when given, gets the
// instant the mac left (read just before): the coordinator admits, and joins a member, on
// that message, so a member's first lease counts from there (elastic/lease_renewal.h).
nlohmann::json authenticate(Connection& c, const std::string& token, nlohmann::json hello, TimePoint deadline,
                            TimePoint* auth_sent = nullptr);

}  // namespace rf::elastic
