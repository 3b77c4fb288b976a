#pragma once
// AdminClient — the launcher's connection to the coordinator (role "launcher"): status
// for the live line and for evictions (a worker evicted as hung is SIGKILLed before it
// is replaced), exited (D1 seen by the launcher), stop (graceful stop, R5), summary.
#include <string>

#include <nlohmann/json.hpp>

#include "elastic/wire.h"

namespace rf::elastic {

class AdminClient {
 public:
  AdminClient(std::string host, int port, std::string token, Duration timeout = std::chrono::seconds(10));
  nlohmann::json status();
  // What the coordinator knew of the process that exited (its exited_reply).
  struct ExitedReply {
    bool registered = false;  // its join was accepted at some point
    bool left = false;        // it had left the job gracefully (finished or stopped) first
    std::string phase;        // the job's phase after the exit
  };
  ExitedReply exited(int slot, int64_t incarnation, int status, int64_t exited_wall_us);
  void stop();
  nlohmann::json summary();

 private:
  nlohmann::json call(nlohmann::json req);
  Duration timeout_;
  Connection conn_;
};

}  // namespace rf::elastic
