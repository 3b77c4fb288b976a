#include "elastic/etcd_client.h"

#include <curl/curl.h>

#include <mutex>

#include <nlohmann/json.hpp>

#include "base/str.h"

namespace rf::elastic {

using json = nlohmann::json;

namespace {

// curl_global_init is not thread-safe: once per process, before the first handle.
void curl_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

size_t collect(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

// etcd's JSON gateway writes int64 fields as strings, and leaves out zero values.
int64_t int_field(const json& j, const char* key) {
  if (!j.contains(key)) return 0;
  const json& v = j[key];
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_string()) return std::stoll(v.get<std::string>());
  throw rf::Error(rf::str("etcd: field '", key, "' is neither a number nor a string: ", v.dump()));
}

EtcdKv kv_of(const json& j) {
  EtcdKv kv;
  kv.key = base64_decode(j.value("key", ""));
  kv.value = base64_decode(j.value("value", ""));
  kv.create_revision = int_field(j, "create_revision");
  kv.mod_revision = int_field(j, "mod_revision");
  kv.version = int_field(j, "version");
  kv.lease = int_field(j, "lease");
  return kv;
}

}  // namespace

bool etcd_client_built() { return true; }

EtcdClient::EtcdClient(EtcdOptions options) : options_(std::move(options)) {
  if (options_.endpoints.empty()) throw rf::InvalidInput("EtcdClient: no endpoints");
  // curl takes 0 as "no timeout": a call could then wait for etcd's own (7 s by default).
  if (options_.timeout < std::chrono::milliseconds(1))
    throw rf::InvalidInput("EtcdClient: the call timeout must be at least 1 ms");
  curl_once();
}

std::string EtcdClient::post(const std::string& path, const std::string& body) {
  std::string failures;
  const size_t n = options_.endpoints.size();
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (current_ + k) % n;
    const std::string url = options_.endpoints[i] + path;
    CURL* h = curl_easy_init();
    if (!h) throw rf::Error("etcd: curl_easy_init failed");
    std::string reply;
    curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &reply);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(std::chrono::duration_cast<std::chrono::milliseconds>(options_.timeout).count()));
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);  // timeouts without SIGALRM: safe in threads
    const CURLcode rc = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(headers);
    curl_easy_cleanup(h);
    if (rc == CURLE_OK && status == 200) {
      current_ = i;
      return reply;
    }
    // A member that answers with an error (not the leader's business: every member serves
    // reads and forwards writes) is as good as down for this call.
    failures += rf::str(failures.empty() ? "" : "; ", options_.endpoints[i], ": ",
                        rc != CURLE_OK ? curl_easy_strerror(rc) : rf::str("HTTP ", status, " ", reply.substr(0, 200)));
  }
  throw EtcdUnavailable(rf::str("etcd ", path, ": no endpoint answered (", failures, ")"));
}

std::optional<EtcdKv> EtcdClient::get(const std::string& key) {
  const json r = json::parse(post("/v3/kv/range", json{{"key", base64_encode(key)}}.dump()));
  if (!r.contains("kvs") || r["kvs"].empty()) return std::nullopt;
  return kv_of(r["kvs"][0]);
}

std::vector<EtcdKv> EtcdClient::get_prefix(const std::string& prefix) {
  const json r = json::parse(post("/v3/kv/range", json{{"key", base64_encode(prefix)},
                                                        {"range_end", base64_encode(etcd_prefix_end(prefix))}}
                                                      .dump()));
  std::vector<EtcdKv> out;
  if (r.contains("kvs"))
    for (const json& kv : r["kvs"]) out.push_back(kv_of(kv));
  return out;
}

int64_t EtcdClient::put(const std::string& key, const std::string& value, int64_t lease) {
  json body{{"key", base64_encode(key)}, {"value", base64_encode(value)}};
  if (lease) body["lease"] = std::to_string(lease);
  const json r = json::parse(post("/v3/kv/put", body.dump()));
  return int_field(r.value("header", json::object()), "revision");
}

bool EtcdClient::del(const std::string& key) {
  const json r = json::parse(post("/v3/kv/deleterange", json{{"key", base64_encode(key)}}.dump()));
  return int_field(r, "deleted") > 0;
}

bool EtcdClient::cas(const std::string& key, int64_t expected_mod_revision, const std::string& value, int64_t lease,
                     int64_t* new_revision, std::optional<EtcdKv>* current) {
  const std::string k = base64_encode(key);
  json put{{"key", k}, {"value", base64_encode(value)}};
  if (lease) put["lease"] = std::to_string(lease);
  // mod_revision 0 compares equal only for an absent key (etcd's convention), so
  // expected 0 means "create".
  const json body{{"compare", json::array({{{"key", k}, {"target", "MOD"}, {"result", "EQUAL"},
                                            {"mod_revision", std::to_string(expected_mod_revision)}}})},
                  {"success", json::array({{{"request_put", put}}})},
                  {"failure", json::array({{{"request_range", {{"key", k}}}}})}};
  const json r = json::parse(post("/v3/kv/txn", body.dump()));
  const bool ok = r.value("succeeded", false);
  if (ok && new_revision) *new_revision = int_field(r.value("header", json::object()), "revision");
  if (!ok && current) {
    current->reset();
    const json& resp = r.value("responses", json::array());
    if (!resp.empty() && resp[0].contains("response_range")) {
      const json& rr = resp[0]["response_range"];
      if (rr.contains("kvs") && !rr["kvs"].empty()) *current = kv_of(rr["kvs"][0]);
    }
  }
  return ok;
}

bool EtcdClient::txn(const std::vector<EtcdCompare>& compares, const std::vector<EtcdOp>& ops, int64_t* revision) {
  json cmp = json::array();
  for (const auto& c : compares) {
    const bool mod = c.target == EtcdCompare::Mod;
    cmp.push_back({{"key", base64_encode(c.key)}, {"target", mod ? "MOD" : "CREATE"}, {"result", "EQUAL"},
                   {mod ? "mod_revision" : "create_revision", std::to_string(c.revision)}});
  }
  json success = json::array();
  for (const auto& op : ops) {
    if (op.kind == EtcdOp::Put) {
      json put{{"key", base64_encode(op.key)}, {"value", base64_encode(op.value)}};
      if (op.lease) put["lease"] = std::to_string(op.lease);
      success.push_back({{"request_put", put}});
    } else {
      json del{{"key", base64_encode(op.key)}};
      if (!op.range_end.empty()) del["range_end"] = base64_encode(op.range_end);
      success.push_back({{"request_delete_range", del}});
    }
  }
  const json r = json::parse(post("/v3/kv/txn", json{{"compare", cmp}, {"success", success}}.dump()));
  const bool ok = r.value("succeeded", false);
  if (ok && revision) *revision = int_field(r.value("header", json::object()), "revision");
  return ok;
}

int64_t EtcdClient::lease_grant(int64_t ttl_seconds, int64_t* granted) {
  const json r = json::parse(post("/v3/lease/grant", json{{"TTL", std::to_string(ttl_seconds)}}.dump()));
  if (r.contains("error") && !r["error"].get<std::string>().empty())
    throw rf::Error(rf::str("etcd lease grant: ", r["error"].get<std::string>()));
  if (granted) *granted = int_field(r, "TTL");
  return int_field(r, "ID");
}

int64_t EtcdClient::lease_keepalive(int64_t id) {
  // The gateway streams keep-alive replies; one request gets one line back.
  const json r = json::parse(post("/v3/lease/keepalive", json{{"ID", std::to_string(id)}}.dump()));
  const json& res = r.contains("result") ? r["result"] : r;
  return int_field(res, "TTL");
}

void EtcdClient::lease_revoke(int64_t id) {
  (void)post("/v3/lease/revoke", json{{"ID", std::to_string(id)}}.dump());
}

}  // namespace rf::elastic
