#include "elastic/coordinator_replies.h"

#include "elastic/frame.h"

namespace rf::elastic {

using nlohmann::json;

json worker_json(WorkerId w) {
  if (w.slot < 0) return nullptr;
  return json{{"slot", w.slot}, {"incarnation", w.incarnation}};
}

json plan_json(const Plan& p) {
  json ranks = json::array();
  for (const auto& r : p.ranks)
    ranks.push_back({{"rank", r.rank},
                     {"slot", r.worker.slot},
                     {"incarnation", r.worker.incarnation},
                     {"has_state", r.report.has_state},
                     {"step", r.report.step},
                     {"source_rank", r.source_rank ? json(*r.source_rank) : json(nullptr)}});
  return {{"generation", p.generation},
          {"target_step", p.target_step},
          {"target_digest", p.target_digest},
          {"fresh_start", p.fresh_start},
          {"whole_job_restart", p.whole_job_restart},
          {"job_id", p.job_id},
          {"shrink_from", p.shrink_from},
          {"ranks", ranks}};
}

Plan parse_plan_json(const json& j) {
  Plan p;
  p.generation = static_cast<uint64_t>(get_int(j, "generation", 0, int64_t{1} << 53));
  p.target_step = get_int(j, "target_step", -1, int64_t{1} << 53);
  p.target_digest = get_str(j, "target_digest", 128);
  p.fresh_start = get_bool(j, "fresh_start");
  p.whole_job_restart = get_bool(j, "whole_job_restart");
  p.job_id = get_str(j, "job_id", kMaxJobIdBytes);
  if (auto g = get_opt_int(j, "shrink_from", 0, int64_t{1} << 53)) p.shrink_from = static_cast<uint64_t>(*g);
  if (!j.contains("ranks") || !j["ranks"].is_array()) throw ProtocolError("plan has no 'ranks' array");
  for (const auto& r : j["ranks"]) {
    PlanRank pr;
    pr.rank = static_cast<int>(get_int(r, "rank", 0, 1'000'000));
    pr.worker = {static_cast<int>(get_int(r, "slot", 0, 1'000'000)), get_int(r, "incarnation", 0, int64_t{1} << 53)};
    pr.report.has_state = get_bool(r, "has_state");
    pr.report.step = get_int(r, "step", -1, int64_t{1} << 53);
    if (auto s = get_opt_int(r, "source_rank", 0, 1'000'000)) pr.source_rank = static_cast<int>(*s);
    p.ranks.push_back(pr);
  }
  return p;
}

namespace {

json leaders_json(const std::vector<LeaderTerm>& leaders) {
  json out = json::array();
  for (const auto& l : leaders)
    out.push_back({{"id", l.id}, {"from_generation", l.from_generation}, {"since_wall_us", l.since_wall_us}});
  return out;
}

}  // namespace

json status_reply(const Membership& membership, int target_world, const std::map<int, Progress>& progress,
                  const std::vector<json>& evictions, const std::string& leader,
                  const std::vector<LeaderTerm>& leaders) {
  json members = json::array();
  for (size_t r = 0; r < membership.members().size(); ++r)
    members.push_back({{"rank", r}, {"slot", membership.members()[r].slot},
                       {"incarnation", membership.members()[r].incarnation}});
  json standby = json::array();
  for (const auto& w : membership.standby()) standby.push_back({{"slot", w.slot}, {"incarnation", w.incarnation}});
  // The member furthest ahead speaks for the job (every member of a generation reports
  // the same global loss for a step).
  Progress live;
  for (const auto& m : membership.members()) {
    const auto it = progress.find(m.slot);
    if (it != progress.end() && it->second.incarnation == m.incarnation && it->second.step > live.step)
      live = it->second;
  }
  int finished = 0;
  for (const auto& rec : membership.recoveries()) finished += rec.finished;
  return {{"type", "status_reply"},
          {"phase", to_string(membership.phase())},
          {"generation", membership.generation()},
          {"members", members},
          {"world", membership.members().size()},
          {"target_world", target_world},
          {"live_workers", membership.live_workers()},
          {"standby", standby},
          {"step", membership.max_member_step()},
          {"loss", live.loss ? json(*live.loss) : json(nullptr)},
          {"samples_per_s", live.samples_per_s ? json(*live.samples_per_s) : json(nullptr)},
          {"recoveries", finished},
          {"reconfigure", membership.reconfigure_flag()},
          {"stop", membership.stop_flag()},
          {"error", membership.error()},
          {"evicted", evictions},
          {"leader", leader.empty() ? json(nullptr) : json(leader)},
          {"failovers", leaders.empty() ? 0 : leaders.size() - 1}};
}

json summary_reply(const Membership& membership, const std::function<int64_t(TimePoint)>& wall,
                   const std::vector<LeaderTerm>& leaders) {
  json recs = json::array();
  auto ms = [](TimePoint a, TimePoint b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  for (const auto& r : membership.recoveries()) {
    json phases = {{"detect", ms(r.first_seen, r.revoked)},
                   {"agree", r.planned_at > r.revoked ? json(ms(r.revoked, r.planned_at)) : json(nullptr)}};
    for (RecoveryPhase p : kRecoveryPhases) {
      auto it = r.worker_phase_ms.find(p);
      phases[to_string(p)] = it == r.worker_phase_ms.end() ? json(nullptr) : json(it->second);
    }
    recs.push_back({{"cause", to_string(r.cause)},
                    {"worker", worker_json(r.worker)},
                    {"planned", r.planned},
                    {"from_generation", r.from_generation},
                    {"generation", r.finished ? json(r.generation) : json(nullptr)},
                    {"rounds", r.rounds},
                    {"whole_job_restart", r.whole_job_restart},
                    {"target_step", r.target_step},
                    {"world", r.world},
                    {"finished", r.finished},
                    {"first_seen_us", wall(r.first_seen)},
                    {"detect_ms", ms(r.first_seen, r.revoked)},
                    {"total_ms", r.finished ? json(ms(r.first_seen, r.running_at)) : json(nullptr)},
                    {"phases", phases}});
  }
  json fired = json::array();
  for (const auto& f : membership.fired())
    fired.push_back({{"spec", f.spec}, {"slot", f.worker.slot}, {"incarnation", f.worker.incarnation},
                     {"generation", f.generation}, {"step", f.step}, {"wall_us", wall(f.at)}});
  return {{"type", "summary_reply"},
          {"phase", to_string(membership.phase())},
          {"generation", membership.generation()},
          {"error", membership.error()},
          {"recoveries", recs},
          {"fired", fired},
          {"leaders", leaders_json(leaders)}};
}

}  // namespace rf::elastic
