#pragma once
// How `ringfence run` reaches its coordinator: the embedded one (one machine, the default),
// one `ringfence coord` (--coord), or the leader of replicas in etcd (--etcd).
#include <memory>
#include <string>

#include "elastic/admin_client.h"
#include "elastic/coordinator.h"
#include "elastic/launch_options.h"

namespace rf::apps {

struct ControlPlane {
  std::unique_ptr<elastic::Coordinator> embedded;  // only without --coord and --etcd
  std::unique_ptr<elastic::AdminClient> admin;     // the launcher's own connection
  std::string token;
  std::string coord_addr;  // host:port for the workers ("" with --etcd: they ask etcd)
};

// Starts the embedded coordinator (its event log at `event_log`) or finds the external one.
// Throws rf::InvalidInput when the job token is missing, rf::Error when it cannot connect.
ControlPlane connect_control_plane(const elastic::RunOptions& o, const std::string& event_log);

}  // namespace rf::apps
