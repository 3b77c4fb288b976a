#include "comm/host_identity.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace rf::comm {

namespace {

std::string first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string link_target(const char* path) {
  char buf[256];
  const ssize_t n = readlink(path, buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

}  // namespace

std::string host_identity() {
  if (const char* e = std::getenv("RINGFENCE_HOST_ID"); e != nullptr && *e != '\0') return std::string("RINGFENCE_HOST_ID=") + e;
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) name[0] = '\0';
  return first_line("/proc/sys/kernel/random/boot_id") + "/" + link_target("/proc/self/ns/net") + "/" + name;
}

uint64_t host_identity_hash() {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a: a fingerprint for equality, not for security
  for (unsigned char c : host_identity()) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace rf::comm
