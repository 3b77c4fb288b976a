#pragma once
// The coordinator's event log: one JSON object per line, flushed per line so a test or a
// tool can read it while the job runs. Every line has "ts_us" (wall clock, µs since the
// epoch) and "event"; transitions add cause, worker {slot, incarnation}, tag {g, s} and,
// for failures, "since_failure_ms": how long after the failure could first have been seen
// the coordinator acted (docs/protocol.md "Detection").
#include <cstdio>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

namespace rf::elastic {

class EventLog {
 public:
  EventLog() = default;
  explicit EventLog(const std::string& path);  // "" = no file; throws rf::Error if unopenable
  ~EventLog();
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  void write(const nlohmann::json& line);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  std::mutex mu_;
};

}  // namespace rf::elastic
