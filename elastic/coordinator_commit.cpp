// What a leading coordinator replica commits to etcd before any reply that depends on it
// leaves (elastic/control_state.h), and how it stops serving when its leadership is lost.
#include "base/str.h"
#include "elastic/coordinator_impl.h"

namespace rf::elastic {

using nlohmann::json;

ControlState Coordinator::Impl::control_state() const {
  ControlState st;
  st.generation = membership.generation();
  st.phase = membership.phase();
  st.job_id = opt.membership.job_id;
  st.members = membership.members();
  if (membership.plan()) st.plan = plan_json(*membership.plan());
  else if (membership.running_plan()) st.plan = plan_json(*membership.running_plan());
  st.error = membership.error();
  st.leaders = leaders;
  return st;
}

// Commits what changed since the last commit: false when leadership is lost (the caller
// must not send anything; the loop stops).
bool Coordinator::Impl::commit_if_changed() {
  if (!opt.leadership) return true;
  if (owner->lost_.load()) return false;
  // The state changes only with the generation, the phase (members, the running plan and
  // the error change with it) or a round's plan: this runs before every socket write, so
  // the state is encoded only when one of them moved.
  const auto key = std::make_tuple(membership.generation(), static_cast<int>(membership.phase()),
                                   membership.plan().has_value());
  if (key == committed_key && uncommitted.empty()) return true;
  std::string st = encode_control_state(control_state());
  if (st == committed && uncommitted.empty()) return true;
  std::vector<EtcdOp> ops = std::move(uncommitted);
  uncommitted.clear();
  if (st != committed) ops.push_back(EtcdOp::put("state", st));
  size_t bytes = 0;
  for (const auto& op : ops) bytes += op.key.size() + op.value.size() + op.range_end.size();
  const size_t n_ops = ops.size();
  const TimePoint t0 = Clock::now();
  try {
    opt.leadership->commit(std::move(ops));
  } catch (const NotLeader& e) {
    lose(e.what());
    return false;
  }
  // Every commit is a line: what it wrote and how long the loop waited for it (the loop
  // sends nothing meanwhile), for docs/scale.md's costs per generation.
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  committed = std::move(st);
  committed_key = key;
  committed_generation = membership.generation();
  committed_phase = membership.phase();
  log.write({{"ts_us", rf::wall_us()}, {"event", "commit"}, {"g", committed_generation},
             {"phase", to_string(*committed_phase)}, {"ops", n_ops}, {"bytes", bytes}, {"ms", ms}});
  return true;
}

// Stops serving at once: no reply that etcd may not hold leaves, every connection closes
// (workers self-fence and follow the next leader).
void Coordinator::Impl::lose(const std::string& why) {
  if (owner->lost_.load()) return;
  lost_reason = why;  // before the flag: lost_reason() reads it once the flag is set
  owner->lost_.store(true);
  log.write({{"ts_us", rf::wall_us()}, {"event", "lost_leadership"}, {"leader", opt.leadership->id()},
             {"g", membership.generation()}, {"error", why}});
  for (auto& c : conns) {
    c.out.clear();
    c.dead = true;
  }
  stopping.store(true);
}

}  // namespace rf::elastic
