#include "elastic/token.h"

#include <cstdio>
#include <fstream>

#include "base/error.h"
#include "base/str.h"

namespace rf::elastic {

std::string random_token() {
  unsigned char buf[16];
  std::FILE* f = std::fopen("/dev/urandom", "rb");
  if (!f) throw rf::Error("cannot open /dev/urandom for the job token");
  const size_t n = std::fread(buf, 1, sizeof buf, f);
  std::fclose(f);
  if (n != sizeof buf) throw rf::Error("short read from /dev/urandom for the job token");
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (unsigned char c : buf) s += hex[c >> 4], s += hex[c & 15];
  return s;
}

bool token_equal(const std::string& a, const std::string& b) {
  // Touch every byte of the longer string whatever the contents; only the length leaks.
  const size_t n = a.size() > b.size() ? a.size() : b.size();
  unsigned diff = static_cast<unsigned>(a.size() ^ b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

std::string read_token_file(const std::string& path) {
  std::ifstream f(path);
  std::string t;
  if (!f || !(f >> t) || t.empty()) throw rf::InvalidInput(rf::str("cannot read a job token from '", path, "'"));
  return t;
}

}  // namespace rf::elastic
