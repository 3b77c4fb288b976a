#include "elastic/control_state.h"

#include <cstdio>

#include "base/str.h"
#include "elastic/wire.h"

namespace rf::elastic {

using nlohmann::json;

std::string encode_control_state(const ControlState& s) {
  json members = json::array();
  for (const auto& m : s.members) members.push_back({m.slot, m.incarnation});
  json leaders = json::array();
  for (const auto& l : s.leaders)
    leaders.push_back({{"id", l.id}, {"from_generation", l.from_generation}, {"since_wall_us", l.since_wall_us}});
  return json{{"generation", s.generation}, {"phase", s.phase ? to_string(*s.phase) : ""},   {"job_id", s.job_id}, {"members", members},
              {"plan", s.plan},             {"error", s.error},   {"leaders", leaders}}
      .dump();
}

ControlState decode_control_state(const std::string& text) {
  const json j = json::parse(text, nullptr, false);
  auto bad = [&](const char* what) {
    return rf::Error(rf::str("etcd: the control state ", what, ": ", text.substr(0, 200)));
  };
  if (!j.is_object()) throw bad("is not a JSON object");
  ControlState s;
  if (!j.contains("generation") || !j["generation"].is_number_unsigned()) throw bad("has no generation");
  s.generation = j["generation"].get<uint64_t>();
  if (j.contains("phase") && !j["phase"].is_string()) throw bad("has a phase that is not a string");
  if (const std::string phase = j.value("phase", ""); !phase.empty()) {
    s.phase = parse_phase(phase);
    if (!s.phase) throw bad("has an unknown phase");
  }
  s.job_id = j.value("job_id", "");
  s.error = j.value("error", "");
  s.plan = j.value("plan", json());
  for (const auto& m : j.value("members", json::array())) {
    if (!m.is_array() || m.size() != 2 || !m[0].is_number_integer() || !m[1].is_number_integer())
      throw bad("has a member that is not [slot, incarnation]");
    s.members.push_back({m[0].get<int>(), m[1].get<int64_t>()});
  }
  for (const auto& l : j.value("leaders", json::array())) {
    if (!l.is_object()) throw bad("has a leader that is not an object");
    s.leaders.push_back({l.value("id", ""), l.value("from_generation", uint64_t{0}), l.value("since_wall_us", int64_t{0})});
  }
  return s;
}

std::string kv_scope_begin(uint64_t generation) {
  char g[24];
  std::snprintf(g, sizeof g, "%020llu", static_cast<unsigned long long>(generation));
  return rf::str(kKvPrefix, g, "/");
}

std::string kv_entry_key(uint64_t generation, const std::string& key) {
  return kv_scope_begin(generation) + hex_encode(key);
}

std::optional<std::pair<uint64_t, std::string>> parse_kv_entry_key(const std::string& rel_key) {
  const std::string p = kKvPrefix;
  if (rel_key.size() < p.size() + 21 || rel_key.compare(0, p.size(), p) != 0 || rel_key[p.size() + 20] != '/')
    return std::nullopt;
  uint64_t g = 0;
  for (size_t i = p.size(); i < p.size() + 20; ++i) {
    if (rel_key[i] < '0' || rel_key[i] > '9') return std::nullopt;
    g = g * 10 + static_cast<uint64_t>(rel_key[i] - '0');
  }
  try {
    return std::make_pair(g, hex_decode(rel_key.substr(p.size() + 21)));
  } catch (const rf::Error&) {
    return std::nullopt;
  }
}

}  // namespace rf::elastic
