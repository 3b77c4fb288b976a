#pragma once
// ElasticStore — the coordinator's key-value store (elastic::ControlPlane) seen as comm's
// BootstrapStore, so a generation's communicator finds its peers' addresses through the
// coordinator (docs/protocol.md recovery step 5). Keys are scoped by the generation: the
// coordinator drops scopes older than the previous generation, so an address published
// for g-2 can never be read while forming g (comm's keys also name g, a second fence).
#include <cstdint>

#include "comm/bootstrap/bootstrap_store.h"
#include "elastic/control_plane.h"
#include "elastic/errors.h"

namespace rf::ddp {

class ElasticStore : public comm::BootstrapStore {
 public:
  ElasticStore(elastic::ControlPlane& client, uint64_t generation) : client_(client), generation_(generation) {}
  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  // Waits in short slices so that a revocation of this generation while its peers are
  // still connecting (a failure during recovery) ends the wait at once with
  // comm::Aborted; throws comm::TimedOut (as comm expects of a store) at the timeout.
  std::vector<uint8_t> wait_get(const std::string& key, std::chrono::milliseconds timeout) override;

 private:
  elastic::ControlPlane& client_;
  uint64_t generation_;
};

}  // namespace rf::ddp
