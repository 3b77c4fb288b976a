#pragma once
// Building messages without <format> (g++ 12 lacks it): rf::str("rank ", r, " of ", w).
#include <sstream>
#include <string>
#include <utility>

namespace rf {

template <typename... Args>
std::string str(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

}  // namespace rf
