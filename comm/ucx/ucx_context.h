#pragma once
// UcxContext — the process's UCP context (one per process, shared by the communicators of
// every generation; each communicator makes its own worker and endpoints on it).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ucp/api/ucp.h>

namespace rf::comm {

struct UcxContextOptions {
  // UCX settings applied with ucp_config_modify, e.g. {"TLS", "self,sm,tcp"}. Environment
  // variables (UCX_TLS=...) still apply to what is not named here.
  std::vector<std::pair<std::string, std::string>> config;
  // Our defaults, each applied only when neither `config` nor the environment (UCX_<name>)
  // sets it:
  //   MM_ERROR_HANDLING=y — Debian's UCX 1.13 hides shared memory (posix, sysv)
  //     from endpoints in error mode PEER unless told the mm transports may report peer
  //     failure; without it every byte would go through TCP on loopback.
  //   KEEPALIVE_INTERVAL=100ms — on shared memory a crashed peer is only noticed by the
  //     keepalive (default 20 s); D1 wants it within a second.
  bool ringfence_defaults = true;
};

class UcxContext {
 public:
  static std::shared_ptr<UcxContext> create(const UcxContextOptions& options = {});
  ~UcxContext();
  UcxContext(const UcxContext&) = delete;
  UcxContext& operator=(const UcxContext&) = delete;
  ucp_context_h handle() const { return context_; }

 private:
  UcxContext() = default;
  ucp_context_h context_ = nullptr;
};

}  // namespace rf::comm
