#include "comm/nccl/runtime_connect.h"

#include <cstdlib>

#include "base/str.h"

namespace rf::comm::nccl {

EnvChoice runtime_connect_env(const std::function<const char*(const char*)>& getenv) {
  EnvChoice c{"NCCL_RUNTIME_CONNECT", "0", false, ""};
  if (const char* v = getenv(c.name.c_str()); v != nullptr && *v != '\0') {
    c.kept = true;
    c.existing = v;
  }
  return c;
}

std::string describe_runtime_connect(const EnvChoice& c) {
  const bool at_init = !c.kept || std::atoi(c.existing.c_str()) == 0;
  const std::string when =
      at_init ? "connections are made at init (ncclCommInitRankConfig, ncclCommShrink), within the connect timeout"
              : "connections are made inside each communicator's first collective, which counts against the stall "
                "bound";
  return rf::str("NCCL_RUNTIME_CONNECT=", c.kept ? c.existing : c.value, c.kept ? " (set by the user)" : "", ": ", when);
}

}  // namespace rf::comm::nccl
