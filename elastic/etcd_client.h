#pragma once
// EtcdClient — the few calls of etcd's v3 API the control plane needs, over its JSON
// gateway (HTTP POST /v3/..., libcurl): get, prefix range, put, delete, compare-and-swap on a
// key's mod revision, and leases (grant, keep-alive, revoke). Keys and values are bytes
// (base64 on the wire). Every call has a deadline. Several endpoints (the members of one
// cluster) are tried in turn, starting from the last that answered, so a dead member only
// costs the calls that were talking to it their timeout.
//
// Compare-and-swap is what makes the control plane safe with several coordinators: a write
// that names the mod revision it read succeeds only if nobody wrote in between (etcd's
// revisions are cluster-wide and only grow), so two leaders cannot both advance one key.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/error.h"

namespace rf::elastic {

// No endpoint answered (each one's failure in the text).
class EtcdUnavailable : public rf::Error {
 public:
  using rf::Error::Error;
};

struct EtcdOptions {
  std::vector<std::string> endpoints;  // "http://host:port"
  Duration timeout = std::chrono::seconds(2);  // per call and endpoint
};

// "http://a:2379,http://b:2379" (a bare "host:port" gets http://). Throws rf::InvalidInput
// naming the text when it is empty or an entry is not http(s)://host:port.
std::vector<std::string> parse_etcd_endpoints(const std::string& text);

// One condition of a transaction: the key's mod or create revision equals `revision`
// (0: the key is absent).
struct EtcdCompare {
  enum Target { Mod, Create } target = Mod;
  std::string key;
  int64_t revision = 0;
};

// One write of a transaction: put key=value (on `lease` when not 0), or delete every key
// in [key, range_end) (range_end empty: the key alone).
struct EtcdOp {
  enum Kind { Put, Delete } kind = Put;
  std::string key, value, range_end;
  int64_t lease = 0;
  static EtcdOp put(std::string k, std::string v, int64_t lease = 0) { return {Put, std::move(k), std::move(v), {}, lease}; }
  static EtcdOp erase(std::string from, std::string to = {}) { return {Delete, std::move(from), {}, std::move(to), 0}; }
};

// The end of the range holding every key that starts with `prefix` (etcd's convention).
std::string etcd_prefix_end(std::string prefix);

struct EtcdKv {
  std::string key, value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t version = 0;
  int64_t lease = 0;
};

class EtcdClient {
 public:
  explicit EtcdClient(EtcdOptions options);

  std::optional<EtcdKv> get(const std::string& key);
  std::vector<EtcdKv> get_prefix(const std::string& prefix);  // in key order
  int64_t put(const std::string& key, const std::string& value, int64_t lease = 0);  // the new revision
  // Deletes the key; true if it existed.
  bool del(const std::string& key);
  // Writes `value` only if the key's mod revision is `expected_mod_revision` (0: only if
  // the key does not exist). Returns whether it wrote; on success *new_revision (if given)
  // is the key's new mod revision, on failure *current holds what the key is now (nullopt:
  // absent).
  bool cas(const std::string& key, int64_t expected_mod_revision, const std::string& value, int64_t lease = 0,
           int64_t* new_revision = nullptr, std::optional<EtcdKv>* current = nullptr);

  // Applies every op in one atomic step if every compare holds; returns whether it did.
  // On success *revision (if given) is the store's revision after it.
  bool txn(const std::vector<EtcdCompare>& compares, const std::vector<EtcdOp>& ops, int64_t* revision = nullptr);

  // A lease of `ttl` seconds (etcd rounds up to its minimum); its id. *granted (if given)
  // is the TTL etcd gave it.
  int64_t lease_grant(int64_t ttl_seconds, int64_t* granted = nullptr);
  // Renews it; returns the remaining TTL in seconds, 0 when the lease has expired.
  int64_t lease_keepalive(int64_t id);
  void lease_revoke(int64_t id);

  // The endpoint that answered last.
  const std::string& endpoint() const { return options_.endpoints[current_]; }

 private:
  std::string post(const std::string& path, const std::string& body);
  EtcdOptions options_;
  size_t current_ = 0;
};

// Whether this build has the client (libcurl was found); without it every call throws
// EtcdUnavailable saying so.
bool etcd_client_built();

std::string base64_encode(const std::string& bytes);
std::string base64_decode(const std::string& text);  // throws rf::Error on bad input

}  // namespace rf::elastic
