#pragma once
// The launcher's one live line (generation, phase, members, step, recoveries, restarts):
// rewritten in place with \r on a terminal, printed as plain lines (when it changes, at
// most once a second) otherwise; and the end-of-job summary. All on stderr, so a worker's
// stdout stays clean.
#include <string>

#include <nlohmann/json.hpp>

#include "base/clock.h"

namespace rf::apps {

// The live line for a coordinator status (elastic/coordinator.h status_reply): generation,
// phase, members, step, the loss and throughput the furthest member reported, recoveries,
// restarts and flags.
std::string live_line(const nlohmann::json& status, int restarts);

class StatusLine {
 public:
  explicit StatusLine(bool enabled);
  void update(const nlohmann::json& status, int restarts);
  void note(const std::string& text);  // an event worth its own line
  void finish(const nlohmann::json& summary);

 private:
  void clear();
  bool enabled_, tty_;
  std::string last_;
  bool on_line_ = false;
  rf::TimePoint last_print_{};
};

}  // namespace rf::apps
