#include "apps/ringfence/coord_replica.h"

#include <poll.h>

#include <memory>
#include <optional>

#include "base/log.h"
#include "base/str.h"
#include "elastic/auth.h"
#include "elastic/control_state.h"
#include "elastic/etcd_client.h"
#include "elastic/leadership.h"
#include "elastic/wire.h"

namespace rf::apps {

using namespace rf::elastic;

namespace {

// A replica's line names the replica: several may share a terminal or a log.
void say(const std::string& id, const std::string& text) { rf::log::info("coord", id, ": ", text); }

// The phase the job's committed state holds (nullopt when none yet).
std::optional<Phase> committed_phase(Leadership& lead) {
  for (const auto& kv : lead.load("state"))
    if (kv.key == "state") return decode_control_state(kv.value).phase;
  return std::nullopt;
}

// A standby's watch on the leader: an authenticated connection to its coordinator (role
// replica) that the leader's process ending closes. Then the standby deposes it at once
// instead of waiting up to a lease for etcd to expire it. Only a connection that was open
// counts: a refused one may be a leader that has not bound its port yet.
class LeaderWatch {
 public:
  LeaderWatch(Leadership& lead, std::string token, std::string id) : lead_(lead), token_(std::move(token)), id_(std::move(id)) {}

  // One look, called while campaigning (every poll): never blocks for long.
  void look() {
    try {
      if (!conn_.connected()) {
        if (Clock::now() < next_try_) return;
        next_try_ = Clock::now() + std::chrono::milliseconds(200);
        watched_ = lead_.leader_now();
        if (!watched_ || watched_->id == id_) return;
        const auto [host, port] = parse_host_port(watched_->addr);
        const TimePoint deadline = Clock::now() + std::chrono::milliseconds(500);
        conn_.connect(host, port, deadline, false);
        authenticate(conn_, token_, {{"type", "hello"}, {"role", "replica"}}, deadline);
        return;
      }
      if (!conn_.peer_closed(0)) return;
      conn_.close();
      // The leader's process ended, or it stopped serving: its term is over either way.
      const auto now_leading = lead_.leader_now();
      if (watched_ && now_leading && now_leading->create_revision == watched_->create_revision) {
        lead_.depose(*now_leading);
        say(id_, rf::str("the leader ", watched_->id, " closed its connection: its lease revoked"));
      }
    } catch (const rf::Error&) {
      conn_.close();  // etcd or the leader unreachable now: look again later
    }
  }

 private:
  Leadership& lead_;
  std::string token_, id_;
  Connection conn_;
  std::optional<LeaderInfo> watched_;
  TimePoint next_try_{};
};

// Serves until the job is over and no launcher is left. A leader that took over waits a
// while longer: a launcher may still be following the old leader (it finds this one only
// once a call to the old one failed and etcd names this one: up to a lease and a connect
// attempt). Leaving when the first launchers left would leave it no leader to report its
// workers' exits to and get the job's summary from.
void serve(Coordinator& coord, const Leadership& lead, bool took_over, const volatile sig_atomic_t& stop) {
  const Duration linger = took_over ? 2 * lead.lease() + std::chrono::seconds(1) : Duration::zero();
  bool had_launcher = false;
  TimePoint last_launcher = Clock::now();
  while (!stop && !coord.lost_leadership()) {
    const int launchers = coord.launcher_connections();
    had_launcher |= launchers > 0;
    if (launchers > 0) last_launcher = Clock::now();
    if (coord.finished() && had_launcher && launchers == 0 && Clock::now() - last_launcher >= linger) break;
    ::poll(nullptr, 0, 20);
  }
}

// What a replica that won the lead does first.
struct Lead {
  std::unique_ptr<Coordinator> coord;  // null: not serving (see exit_code)
  bool took_over = false;              // an earlier leader ran this job
  std::optional<int> exit_code;        // the job ended under an earlier leader: the replica's status
};

// A job that ended under an earlier leader stays ended: the standbys leave one by one.
// etcd not answering: no coordinator and no exit code (the lead is given back).
Lead take_lead(const CoordOptions& o, const CoordinatorOptions& base, const std::shared_ptr<Leadership>& lead,
               const std::string& id) {
  Lead out;
  try {
    const std::optional<Phase> phase = committed_phase(*lead);
    out.took_over = phase.has_value();
    if (phase == Phase::Done || phase == Phase::Stopped) {
      say(id, rf::str("job '", o.job, "' is over (", to_string(*phase), " in etcd); a new job needs a new --job name, or ",
                      "the old one's keys deleted (etcdctl del --prefix ", control_prefix(o.job), ")"));
      lead->resign();
      out.exit_code = phase == Phase::Done ? 0 : 1;
      return out;
    }
    CoordinatorOptions co = base;
    co.leadership = lead;
    out.coord = std::make_unique<Coordinator>(co);
  } catch (const EtcdUnavailable& e) {
    say(id, rf::str("won the lead but could not read the job's state: ", e.what()));
  }
  return out;
}

}  // namespace

int run_coord_replica(const CoordOptions& o, CoordinatorOptions base, const volatile sig_atomic_t& stop) {
  const LeadershipOptions lo{parse_etcd_endpoints(o.etcd), o.job, o.leader_lease};
  const std::string addr = rf::str(o.advertise.empty() ? o.host : o.advertise, ":", o.port);
  const std::string id = o.id.empty() ? addr : o.id;
  while (!stop) {
    auto lead = std::make_shared<Leadership>(lo, id);
    say(id, rf::str("standing by for job '", o.job, "' (etcd ", o.etcd, ")"));
    LeaderWatch watch(*lead, base.token, id);
    const auto unavailable = [&](const std::string& why) { say(id, "etcd does not answer, still trying: " + why); };
    const auto look = [&] {
      watch.look();
      return stop != 0;
    };
    if (!lead->campaign(addr, look, unavailable)) break;
    Lead l = take_lead(o, base, lead, id);
    if (l.exit_code) return *l.exit_code;
    if (!l.coord) continue;  // gives the lead back (the Leadership resigns) and stands by again
    say(id, rf::str("leading job '", o.job, "' at ", addr, " (lease ",
                    std::chrono::duration<double>(lead->lease()).count(), " s)"));
    l.coord->start();
    serve(*l.coord, *lead, l.took_over, stop);
    if (l.coord->lost_leadership()) {
      say(id, "lost the lead: " + l.coord->lost_reason());
      continue;
    }
    const Phase phase = l.coord->phase();
    l.coord.reset();  // stops serving, then the lead is given back
    lead->resign();
    say(id, rf::str("job ", to_string(phase)));
    return phase == Phase::Done ? 0 : 1;
  }
  return 1;
}

}  // namespace rf::apps
