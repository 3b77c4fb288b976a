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
  void exited(int slot, int64_t incarnation, int status, int64_t exited_wall_us);
  void stop();
  nlohmann::json summary();

 private:
  nlohmann::json call(nlohmann::json req);
  Duration timeout_;
  Connection conn_;
};

}  // namespace rf::elastic
