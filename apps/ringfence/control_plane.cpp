#include "apps/ringfence/control_plane.h"

#include <cstdlib>
#include <tuple>

#include "base/error.h"
#include "base/str.h"
#include "elastic/etcd_client.h"
#include "elastic/token.h"
#include "elastic/wire.h"

namespace rf::apps {

using namespace rf::elastic;

ControlPlane connect_control_plane(const RunOptions& o, const std::string& event_log) {
  ControlPlane cp;
  const int world = o.nprocs * o.nnodes;
  std::string host = "127.0.0.1";
  int port = 0;
  if (o.coord.empty() && o.etcd.empty()) {
    cp.token = o.token.empty() ? random_token() : o.token;
    CoordinatorOptions co;
    co.host = o.listen_host;
    co.port = o.listen_port;
    co.token = cp.token;
    co.event_log = event_log;
    co.membership.target_world = world;
    co.membership.min_world = o.min_world ? o.min_world : world;
    co.membership.heartbeat = o.timing.heartbeat;
    co.membership.lease = o.timing.lease;
    co.membership.join_window = o.timing.join_window;
    co.membership.min_world_timeout = o.timing.min_world_timeout;
    co.membership.report_timeout = o.timing.report_timeout;
    cp.embedded = std::make_unique<Coordinator>(co);
    cp.embedded->start();
    port = cp.embedded->port();
  } else if (!o.token.empty()) {
    cp.token = o.token;
  } else if (!o.token_file.empty()) {
    cp.token = read_token_file(o.token_file);
  } else if (const char* t = std::getenv("RINGFENCE_TOKEN"); t && *t) {
    cp.token = t;
  } else {
    throw rf::InvalidInput(rf::str(o.etcd.empty() ? "--coord" : "--etcd",
                                   " needs the job token: --token-file FILE or RINGFENCE_TOKEN"));
  }
  if (!o.etcd.empty()) {
    // Several coordinator replicas: the launcher and its workers follow the leader etcd names.
    cp.admin = std::make_unique<AdminClient>(parse_etcd_endpoints(o.etcd), o.job, cp.token);
    return cp;
  }
  if (!o.coord.empty()) std::tie(host, port) = parse_host_port(o.coord);
  cp.coord_addr = rf::str(host, ":", port);
  cp.admin = std::make_unique<AdminClient>(host, port, cp.token);
  return cp;
}

}  // namespace rf::apps
