#include "elastic/error_file.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>

namespace rf::elastic {

void report_error_to_launcher(const std::string& message) {
  const char* path = std::getenv(kErrorFileEnv);
  if (!path || !*path) return;
  std::ofstream f(path, std::ios::trunc);
  f << message.substr(0, kMaxErrorFileBytes);
}

std::string take_error_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) return "";
  std::string text(std::istreambuf_iterator<char>(f), {});
  f.close();
  std::remove(path.c_str());
  return text.substr(0, kMaxErrorFileBytes);
}

}  // namespace rf::elastic
