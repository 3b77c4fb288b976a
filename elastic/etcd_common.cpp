// The parts of the etcd client that need no HTTP: base64 and endpoint lists.
#include <openssl/evp.h>

#include "base/str.h"
#include "elastic/etcd_client.h"

namespace rf::elastic {

std::string base64_encode(const std::string& bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string base64_decode(const std::string& text) {
  if (text.empty()) return {};
  if (text.size() % 4 != 0) throw rf::Error(rf::str("etcd: base64 of length ", text.size(), " (not a multiple of 4)"));
  std::string out(3 * text.size() / 4, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(text.data()), static_cast<int>(text.size()));
  if (n < 0) throw rf::Error("etcd: invalid base64");
  size_t len = static_cast<size_t>(n);
  // EVP_DecodeBlock counts the padding as zero bytes.
  for (size_t i = text.size(); i-- > 0 && text[i] == '=';) --len;
  out.resize(len);
  return out;
}

std::string etcd_prefix_end(std::string prefix) {
  for (size_t i = prefix.size(); i-- > 0;) {
    if (static_cast<unsigned char>(prefix[i]) < 0xff) {
      prefix[i] = static_cast<char>(static_cast<unsigned char>(prefix[i]) + 1);
      prefix.resize(i + 1);
      return prefix;
    }
  }
  return std::string(1, '\0');  // all 0xff: to the end of the keyspace
}

std::vector<std::string> parse_etcd_endpoints(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    std::string e = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!e.empty()) {
      if (e.find("://") == std::string::npos) e = "http://" + e;
      const size_t hostpart = e.find("://") + 3;
      const bool scheme_ok = e.rfind("http://", 0) == 0 || e.rfind("https://", 0) == 0;
      if (!scheme_ok || e.find(':', hostpart) == std::string::npos || e.size() == hostpart)
        throw rf::InvalidInput(rf::str("etcd endpoint '", e, "' in '", text, "' is not http(s)://HOST:PORT"));
      while (e.back() == '/') e.pop_back();
      out.push_back(e);
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (out.empty()) throw rf::InvalidInput(rf::str("no etcd endpoint in '", text, "'"));
  return out;
}

}  // namespace rf::elastic
