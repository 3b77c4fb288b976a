#include "apps/ringfence/coord_replica.h"

#include <poll.h>

#include <cstdio>
#include <memory>

#include "base/str.h"
#include "elastic/control_state.h"
#include "elastic/etcd_client.h"
#include "elastic/leadership.h"

namespace rf::apps {

using namespace rf::elastic;

namespace {

void say(const std::string& id, const std::string& text) {
  std::printf("ringfence coord %s: %s\n", id.c_str(), text.c_str());
  std::fflush(stdout);
}

// The phase the job's committed state holds ("" when none yet).
std::string committed_phase(Leadership& lead) {
  for (const auto& kv : lead.load("state"))
    if (kv.key == "state") return decode_control_state(kv.value).phase;
  return "";
}

}  // namespace

int run_coord_replica(const CoordOptions& o, CoordinatorOptions base, const volatile sig_atomic_t& stop) {
  const LeadershipOptions lo{parse_etcd_endpoints(o.etcd), o.job, o.leader_lease};
  const std::string addr = rf::str(o.advertise.empty() ? o.host : o.advertise, ":", o.port);
  const std::string id = o.id.empty() ? addr : o.id;
  while (!stop) {
    auto lead = std::make_shared<Leadership>(lo, id);
    say(id, rf::str("standing by for job '", o.job, "' (etcd ", o.etcd, ")"));
    if (!lead->campaign(addr, [&] { return stop != 0; })) break;
    std::unique_ptr<Coordinator> coord;
    try {
      // A job that ended under an earlier leader stays ended: the standbys leave one by one.
      const std::string phase = committed_phase(*lead);
      if (phase == "DONE" || phase == "STOPPED") {
        say(id, rf::str("job '", o.job, "' is over (", phase, ")"));
        lead->resign();
        return phase == "DONE" ? 0 : 1;
      }
      CoordinatorOptions co = base;
      co.leadership = lead;
      coord = std::make_unique<Coordinator>(co);
    } catch (const EtcdUnavailable& e) {
      say(id, rf::str("won the lead but could not read the job's state: ", e.what()));
      continue;  // gives the lead back (the Leadership resigns) and stands by again
    }
    say(id, rf::str("leading job '", o.job, "' at ", addr, " (lease ",
                    std::chrono::duration<double>(lead->lease()).count(), " s)"));
    coord->start();
    bool had_launcher = false;
    while (!stop && !coord->lost_leadership()) {
      had_launcher |= coord->launcher_connections() > 0;
      if (coord->finished() && had_launcher && coord->launcher_connections() == 0) break;
      ::poll(nullptr, 0, 20);
    }
    if (coord->lost_leadership()) {
      say(id, "lost the lead: " + coord->lost_reason());
      continue;
    }
    const Phase phase = coord->phase();
    coord.reset();  // stops serving, then the lead is given back
    lead->resign();
    say(id, rf::str("job ", to_string(phase)));
    return phase == Phase::Done ? 0 : 1;
  }
  return 1;
}

}  // namespace rf::apps
