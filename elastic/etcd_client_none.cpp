// The etcd client in a build without libcurl: every call says so.
#include "elastic/etcd_client.h"

namespace rf::elastic {

namespace {
[[noreturn]] void no_curl() {
  throw EtcdUnavailable("this build has no etcd client (libcurl was not found when it was configured)");
}
}  // namespace

EtcdClient::EtcdClient(EtcdOptions options) : options_(std::move(options)) {
  if (options_.endpoints.empty()) throw rf::InvalidInput("EtcdClient: no endpoints");
  if (options_.timeout < std::chrono::milliseconds(1))
    throw rf::InvalidInput("EtcdClient: the call timeout must be at least 1 ms");
}
std::string EtcdClient::post(const std::string&, const std::string&) { no_curl(); }
std::optional<EtcdKv> EtcdClient::get(const std::string&) { no_curl(); }
std::vector<EtcdKv> EtcdClient::get_prefix(const std::string&) { no_curl(); }
int64_t EtcdClient::put(const std::string&, const std::string&, int64_t) { no_curl(); }
bool EtcdClient::del(const std::string&) { no_curl(); }
bool EtcdClient::cas(const std::string&, int64_t, const std::string&, int64_t, int64_t*, std::optional<EtcdKv>*) {
  no_curl();
}
bool EtcdClient::txn(const std::vector<EtcdCompare>&, const std::vector<EtcdOp>&, int64_t*) { no_curl(); }
int64_t EtcdClient::lease_grant(int64_t, int64_t*) { no_curl(); }
int64_t EtcdClient::lease_keepalive(int64_t) { no_curl(); }
void EtcdClient::lease_revoke(int64_t) { no_curl(); }
bool etcd_client_built() { return false; }

}  // namespace rf::elastic
