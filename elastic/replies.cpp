#include "elastic/replies.h"

#include <map>

#include "base/str.h"
#include "elastic/errors.h"

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

Reply heartbeat_reply(const json& m) {
  HeartbeatReply r;
  r.fenced = field<bool>(m, "fenced", false);
  r.generation = field<uint64_t>(m, "generation", 0);
  r.phase = phase_field(m);
  r.reconfigure = field<bool>(m, "reconfigure", false);
  r.stop = field<bool>(m, "stop", false);
  r.planned = field<bool>(m, "planned", false);
  r.cause = field<std::string>(m, "cause", "");
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

using Decoder = Reply (*)(const json&);
const std::map<std::string, Decoder>& decoders() {
  static const std::map<std::string, Decoder> table = {{"heartbeat_reply", heartbeat_reply},
                                                       {"exited_reply", exited_reply},
                                                       {"status_reply", status_reply},
                                                       {"summary_reply", summary_reply}};
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

template HeartbeatReply decode_reply_as<HeartbeatReply>(const json&);
template ExitedReply decode_reply_as<ExitedReply>(const json&);
template StatusReply decode_reply_as<StatusReply>(const json&);
template SummaryReply decode_reply_as<SummaryReply>(const json&);

}  // namespace rf::elastic
