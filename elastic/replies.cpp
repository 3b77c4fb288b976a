#include "elastic/replies.h"

#include <map>

#include "base/str.h"
#include "elastic/coordinator_replies.h"
#include "elastic/errors.h"
#include "elastic/frame.h"

namespace rf::elastic {

using nlohmann::json;

namespace {

// The field `key` of type T, `fallback` when absent or null.
template <class T>
T field(const json& m, const char* key, T fallback) {
  const auto it = m.find(key);
  if (it == m.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    throw ProtocolError(rf::str("field '", key, "' has the wrong type"));
  }
}

std::optional<Phase> phase_field(const json& m) {
  const std::string text = field<std::string>(m, "phase", "");
  if (text.empty()) return std::nullopt;
  const auto p = parse_phase(text);
  if (!p) throw ProtocolError(rf::str("field 'phase' = '", text, "' names no phase"));
  return p;
}

// A list of {slot, incarnation} objects.
std::vector<WorkerId> workers_field(const json& m, const char* key) {
  std::vector<WorkerId> out;
  for (const auto& w : field<json>(m, key, json::array())) {
    if (!w.is_object()) throw ProtocolError(rf::str("field '", key, "' holds an entry that is not an object"));
    out.push_back({field<int>(w, "slot", -1), field<int64_t>(w, "incarnation", -1)});
  }
  return out;
}

Reply welcome(const json& m) {
  WelcomeReply w;
  w.generation = static_cast<uint64_t>(get_int(m, "generation", 0, int64_t{1} << 53));
  w.phase = phase_field(m);
  w.target_world = static_cast<int>(get_int(m, "target_world", 1, 1'000'000));
  w.heartbeat_ms = get_opt_int(m, "heartbeat_ms", 1, 3'600'000);
  w.lease_ms = get_opt_int(m, "lease_ms", 1, 3'600'000);
  return w;
}

Reply heartbeat_reply(const json& m) {
  HeartbeatReply r;
  r.fenced = field<bool>(m, "fenced", false);
  r.generation = field<uint64_t>(m, "generation", 0);
  r.phase = phase_field(m);
  r.reconfigure = field<bool>(m, "reconfigure", false);
  r.stop = field<bool>(m, "stop", false);
  r.planned = field<bool>(m, "planned", false);
  if (const std::string cause = field<std::string>(m, "cause", ""); !cause.empty()) {
    r.cause = parse_cause(cause);
    if (!r.cause) throw ProtocolError(rf::str("field 'cause' = '", cause, "' names no cause"));
  }
  return r;
}

Reply exited_reply(const json& m) {
  ExitedReply r;
  for (const char* key : {"registered", "left"}) {
    const auto it = m.find(key);
    if (it == m.end() || !it->is_boolean()) throw ProtocolError(rf::str("field '", key, "' must be a boolean"));
  }
  r.registered = m["registered"].get<bool>();
  r.left = m["left"].get<bool>();
  r.phase = phase_field(m);
  return r;
}

Reply status_reply(const json& m) {
  StatusReply r;
  r.phase = phase_field(m);
  r.generation = field<uint64_t>(m, "generation", 0);
  r.step = field<int64_t>(m, "step", -1);
  r.recoveries = field<int>(m, "recoveries", 0);
  r.members = workers_field(m, "members");
  r.standby = workers_field(m, "standby");
  r.evicted = workers_field(m, "evicted");
  if (m.contains("error")) r.error = field<std::string>(m, "error", "");
  r.raw = m;
  return r;
}

Reply summary_reply(const json& m) {
  SummaryReply r;
  for (const auto& rec : field<json>(m, "recoveries", json::array())) {
    if (!rec.is_object()) throw ProtocolError("field 'recoveries' holds an entry that is not an object");
    r.recoveries.push_back({field<bool>(rec, "finished", false), field<int64_t>(rec, "target_step", -1)});
  }
  r.fired = field<json>(m, "fired", json::array());
  r.raw = m;
  return r;
}

uint64_t generation_of(const json& m) { return static_cast<uint64_t>(get_int(m, "generation", 0, int64_t{1} << 53)); }

Reply answer_reply(const json& m) {
  Answer a;
  a.kind = parse_answer_kind(get_str(m, "result", 32)).value_or(Answer::Stopped);
  a.generation = generation_of(m);
  a.reason = field<std::string>(m, "reason", "");
  return a;
}

// The status words a plan and a ready reply share: a revoked round, a fenced worker, an
// ended job. Anything else is Pending; the caller maps its own success word.
template <class Query>
Query wait_reply(const json& m, const std::string& status, const char* error_key) {
  Query q;
  q.generation = generation_of(m);
  q.error = field<std::string>(m, error_key, "");
  for (auto k : {Query::Revoked, Query::Fenced, Query::Stopped, Query::Done})
    if (status == to_string(k)) q.kind = k;
  return q;
}

Reply plan_reply(const json& m) {
  const std::string status = get_str(m, "status", 32);
  PlanQuery q = wait_reply<PlanQuery>(m, status, "error");
  if (status == to_string(PlanQuery::Ready)) {
    q.kind = PlanQuery::Ready;
    if (!m.contains("plan")) throw ProtocolError("field 'plan' is missing");
    q.plan = parse_plan_json(m["plan"]);
  }
  return q;
}

Reply ready_reply(const json& m) {
  const std::string status = get_str(m, "status", 32);
  ReadyQuery q = wait_reply<ReadyQuery>(m, status, "reason");
  if (status == to_string(ReadyQuery::Running)) q.kind = ReadyQuery::Running;
  else if (status == to_string(Answer::Stale)) q.kind = ReadyQuery::Revoked;
  return q;
}

Reply kv_value_reply(const json& m) {
  KvValueReply r;
  if (field<bool>(m, "found", false)) r.value_hex = get_str(m, "value", kMaxFrameBytes);
  return r;
}

using Decoder = Reply (*)(const json&);
const std::map<std::string, Decoder>& decoders() {
  static const std::map<std::string, Decoder> table = {
      {"welcome", welcome},
      {"heartbeat_reply", heartbeat_reply},
      {"exited_reply", exited_reply},
      {"status_reply", status_reply},
      {"summary_reply", summary_reply},
      {"report_reply", answer_reply},
      {"failure_reply", answer_reply},
      {"leave_reply", answer_reply},
      {"fatal_reply", answer_reply},
      {"plan_reply", plan_reply},
      {"ready_reply", ready_reply},
      {"kv_get_reply", kv_value_reply},
      {"kv_wait_reply", kv_value_reply},
      {"kv_cas_reply", [](const json& m) -> Reply {
         KvCasReply r{field<bool>(m, "swapped", false), std::nullopt};
         if (const auto it = m.find("value"); it != m.end() && !it->is_null()) r.value_hex = get_str(m, "value", kMaxFrameBytes);
         return r;
       }},
  };
  return table;
}

}  // namespace

Reply decode_reply(const json& m) {
  if (!m.is_object()) throw ProtocolError("a reply is not a JSON object");
  const std::string type = field<std::string>(m, "type", "");
  const auto it = decoders().find(type);
  if (it == decoders().end()) throw ProtocolError(rf::str("unexpected reply type '", type, "'"));
  try {
    return it->second(m);
  } catch (const ProtocolError& e) {
    throw ProtocolError(rf::str("reply '", type, "': ", e.what()));
  }
}

template <class T>
T decode_reply_as(const json& m) {
  Reply r = decode_reply(m);
  if (auto* t = std::get_if<T>(&r)) return std::move(*t);
  throw ProtocolError(rf::str("unexpected reply type '", m.value("type", ""), "'"));
}

json encode_reply(const WelcomeReply& r) {
  json j = {{"type", "welcome"}, {"generation", r.generation}, {"target_world", r.target_world}};
  if (r.phase) j["phase"] = to_string(*r.phase);
  if (r.heartbeat_ms) j["heartbeat_ms"] = *r.heartbeat_ms;
  if (r.lease_ms) j["lease_ms"] = *r.lease_ms;
  return j;
}

json encode_reply(const HeartbeatReply& r) {
  json j = {{"type", "heartbeat_reply"}, {"fenced", r.fenced}, {"generation", r.generation},
            {"reconfigure", r.reconfigure}, {"stop", r.stop}, {"planned", r.planned},
            {"cause", r.cause ? to_string(*r.cause) : ""}};
  if (r.phase) j["phase"] = to_string(*r.phase);
  return j;
}

json encode_reply(const ExitedReply& r) {
  json j = {{"type", "exited_reply"}, {"registered", r.registered}, {"left", r.left}};
  if (r.phase) j["phase"] = to_string(*r.phase);
  return j;
}

json encode_reply(const PlanQuery& q) {
  json j = {{"type", "plan_reply"}, {"status", q.kind == PlanQuery::Pending ? "timeout" : to_string(q.kind)},
            {"generation", q.generation}, {"error", q.error}};
  if (q.kind == PlanQuery::Ready) j["plan"] = plan_json(q.plan);
  return j;
}

json encode_reply(const ReadyQuery& q) {
  return {{"type", "ready_reply"}, {"status", q.kind == ReadyQuery::Pending ? "timeout" : to_string(q.kind)},
          {"generation", q.generation}, {"reason", q.error}};
}

json encode_ready_refusal(const Answer& a) {
  return {{"type", "ready_reply"}, {"status", to_string(a.kind)}, {"generation", a.generation}, {"reason", a.reason}};
}

json encode_reply(const KvCasReply& r) {
  return {{"type", "kv_cas_reply"}, {"swapped", r.swapped}, {"value", r.value_hex ? json(*r.value_hex) : json(nullptr)}};
}

json encode_answer(const char* type, const Answer& a) {
  return {{"type", type}, {"result", to_string(a.kind)}, {"generation", a.generation}, {"reason", a.reason}};
}

json encode_kv_value(const char* type, const KvValueReply& r) {
  return {{"type", type}, {"found", r.value_hex.has_value()}, {"value", r.value_hex ? json(*r.value_hex) : json(nullptr)}};
}

template WelcomeReply decode_reply_as<WelcomeReply>(const json&);
template HeartbeatReply decode_reply_as<HeartbeatReply>(const json&);
template ExitedReply decode_reply_as<ExitedReply>(const json&);
template StatusReply decode_reply_as<StatusReply>(const json&);
template SummaryReply decode_reply_as<SummaryReply>(const json&);
template Answer decode_reply_as<Answer>(const json&);
template PlanQuery decode_reply_as<PlanQuery>(const json&);
template ReadyQuery decode_reply_as<ReadyQuery>(const json&);
template KvValueReply decode_reply_as<KvValueReply>(const json&);
template KvCasReply decode_reply_as<KvCasReply>(const json&);

}  // namespace rf::elastic
