#include "elastic/event_log.h"

#include <cerrno>
#include <cstring>

#include "base/error.h"
#include "base/str.h"

namespace rf::elastic {

EventLog::EventLog(const std::string& path) : path_(path) {
  if (path.empty()) return;
  file_ = std::fopen(path.c_str(), "a");
  if (!file_) throw rf::Error(rf::str("cannot open event log '", path, "': ", std::strerror(errno)));
}

EventLog::~EventLog() {
  if (file_) std::fclose(file_);
}

void EventLog::write(const nlohmann::json& line) {
  if (!file_) return;
  std::string s = line.dump() + "\n";
  std::lock_guard<std::mutex> lock(mu_);
  std::fwrite(s.data(), 1, s.size(), file_);
  std::fflush(file_);
}

}  // namespace rf::elastic
