#pragma once
// `ringfence coord --etcd ...`: one replica of the job's coordinator (docs/control-plane.md).
// It stands by until it wins the job's leader key in etcd, then serves as the coordinator,
// continuing from the state its predecessor committed; if it loses the lead it stops serving
// and stands by again. It returns when the job is over (0: DONE) or on `stop`.
#include <csignal>
#include <string>

#include "elastic/coordinator.h"
#include "elastic/launch_options.h"

namespace rf::apps {

// `base`: the coordinator's options (token, membership, event log, host, port); `o` the
// replica's flags (etcd, job, id, advertise, leader lease).
int run_coord_replica(const elastic::CoordOptions& o, elastic::CoordinatorOptions base, const volatile sig_atomic_t& stop);

}  // namespace rf::apps
