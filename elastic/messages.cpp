#include "elastic/messages.h"

#include <map>

#include "base/str.h"
#include "elastic/frame.h"

namespace rf::elastic {

using nlohmann::json;

namespace {

constexpr int64_t kMaxGen = int64_t{1} << 53;
constexpr int64_t kMaxStep = int64_t{1} << 53;

std::optional<Role> parse_role(const std::string& text) { return parse_enum(kRoleNames, text); }

uint64_t gen(const json& m, const char* key = "generation") {
  return static_cast<uint64_t>(get_int(m, key, 0, kMaxGen));
}

Request decode_hello(const json& m) {
  Hello h;
  h.nonce = get_str(m, "nonce", 64);
  if (h.nonce.size() < 16) throw ProtocolError("field 'nonce' is shorter than 16 characters");
  const std::string role = get_str(m, "role", 32);
  const auto parsed = parse_role(role);
  if (!parsed) throw ProtocolError(rf::str("field 'role' = '", role, "' is not member, caller, launcher or replica"));
  h.role = *parsed;
  if (h.role == Role::Member || h.role == Role::Caller) {
    h.slot = static_cast<int>(get_int(m, "slot", 0, kMaxSlot));
    h.incarnation = get_int(m, "incarnation", 0, kMaxGen);
  }
  return h;
}

Activity decode_activity(const json& a) {
  if (!a.is_object()) throw ProtocolError("field 'activity' is not an object");
  Activity out;
  const std::string kind = get_str(a, "kind", 16);
  const auto parsed = parse_activity_kind(kind);
  if (!parsed) throw ProtocolError(rf::str("field 'activity.kind' = '", kind, "' is not idle, compute or wait"));
  out.kind = *parsed;
  out.elapsed = std::chrono::microseconds(get_int(a, "elapsed_us", 0, int64_t{1} << 53));
  out.bound = std::chrono::microseconds(get_int(a, "bound_us", 0, int64_t{1} << 53));
  if (auto r = get_opt_int(a, "runnable_us", 0, int64_t{1} << 53)) out.runnable = std::chrono::microseconds(*r);
  if (auto f = get_opt_int(a, "frozen_us", 0, int64_t{1} << 53)) out.frozen = std::chrono::microseconds(*f);
  out.where = get_str(a, "where", 64);
  return out;
}

// loss and samples_per_s: optional, each a number in [0, 1e30].
std::optional<double> decode_figure(const json& m, const char* key) {
  if (!m.contains(key)) return std::nullopt;
  const auto& v = m[key];
  if (!v.is_number() || !(v.get<double>() >= 0) || v.get<double>() > 1e30)
    throw ProtocolError(rf::str("field '", key, "' is not a number in [0, 1e30]"));
  return v.get<double>();
}

Request decode_heartbeat(const json& m) {
  Heartbeat h;
  h.generation = gen(m);
  h.step = get_int(m, "step", -1, kMaxStep);
  h.loss = decode_figure(m, "loss");
  h.samples_per_s = decode_figure(m, "samples_per_s");
  if ((h.ckpt_failed = get_opt_int(m, "ckpt_failed", 0, int64_t{1} << 53)) && m.contains("ckpt_error"))
    h.ckpt_error = get_str(m, "ckpt_error", kMaxTextBytes);
  if (m.contains("activity")) h.activity = decode_activity(m["activity"]);
  return h;
}

Request decode_report(const json& m) {
  Report r;
  r.round = gen(m, "round");
  r.has_state = get_bool(m, "has_state");
  r.step = get_int(m, "step", -1, kMaxStep);
  r.digest = get_str(m, "digest", 128);
  if (auto g = get_opt_int(m, "comm_generation", 0, kMaxGen)) r.comm_generation = static_cast<uint64_t>(*g);
  if (!r.has_state && (r.step != -1 || !r.digest.empty()))
    throw ProtocolError("a report without state must have step -1 and an empty digest");
  return r;
}

Request decode_failure(const json& m) {
  FailureReport f;
  f.generation = gen(m);
  f.step = get_int(m, "step", -1, kMaxStep);
  if (auto p = get_opt_int(m, "peer_slot", 0, kMaxSlot)) f.peer_slot = static_cast<int>(*p);
  f.cause = get_str(m, "cause", kMaxTextBytes);
  if (auto k = get_opt_str(m, "kind", 16)) {
    const auto kind = parse_failure_kind(*k);
    if (!kind) throw ProtocolError(rf::str("field 'kind' = '", *k, "' is not comm or gpu_stuck"));
    f.kind = *kind;
  }
  return f;
}

Request decode_phase(const json& m) {
  PhaseTiming p;
  p.generation = gen(m);
  const std::string phase = get_str(m, "phase", 32);
  const auto parsed = parse_recovery_phase(phase);
  if (!parsed) throw ProtocolError(rf::str("field 'phase' = '", phase, "' is not connect, transfer or verify"));
  p.phase = *parsed;
  auto it = m.find("ms");
  if (it == m.end() || !it->is_number()) throw ProtocolError("field 'ms' must be a number");
  p.ms = it->get<double>();
  if (!(p.ms >= 0 && p.ms < 1e9)) throw ProtocolError("field 'ms' is outside [0, 1e9)");
  return p;
}

Request decode_leave(const json& m) {
  Leave l{get_opt_int(m, "step", -1, kMaxStep), get_opt_int(m, "ckpt_failed", 0, int64_t{1} << 53), ""};
  if (l.ckpt_failed && m.contains("ckpt_error")) l.ckpt_error = get_str(m, "ckpt_error", kMaxTextBytes);
  return l;
}

Request decode_exited(const json& m) {
  return Exited{static_cast<int>(get_int(m, "slot", 0, kMaxSlot)), get_int(m, "incarnation", 0, kMaxGen),
                static_cast<int>(get_int(m, "status", -1'000'000, 1'000'000)), get_int(m, "exited_wall_us", 0, INT64_MAX)};
}

Request decode_fatal(const json& m) {
  Fatal f{get_str(m, "error", kMaxTextBytes)};
  if (f.error.empty()) throw ProtocolError("field 'error' must not be empty");
  return f;
}

Request decode_injected(const json& m) {
  Injected i{gen(m), get_int(m, "step", -1, kMaxStep), get_str(m, "spec", kMaxKeyBytes)};
  if (i.spec.empty()) throw ProtocolError("field 'spec' must not be empty");
  return i;
}

Request decode_kv_cas(const json& m) {
  return KvCas{gen(m), get_str(m, "key", kMaxKeyBytes), get_opt_str(m, "expected", kMaxValueBytes),
               get_str(m, "desired", kMaxValueBytes)};
}

using Decoder = Request (*)(const json&);

// One decoder per request type, by the wire's `type`.
const std::map<std::string, Decoder>& decoders() {
  static const std::map<std::string, Decoder> table = {
      {Hello::kType, decode_hello},
      {Auth::kType, [](const json& m) -> Request { return Auth{get_str(m, "mac", 128)}; }},
      {Heartbeat::kType, decode_heartbeat},
      {Report::kType, decode_report},
      {PlanRequest::kType, [](const json& m) -> Request { return PlanRequest{gen(m, "round"), get_int(m, "timeout_ms", 0, kMaxWaitMs)}; }},
      {Ready::kType, [](const json& m) -> Request { return Ready{gen(m), get_int(m, "timeout_ms", 0, kMaxWaitMs)}; }},
      {KvSet::kType, [](const json& m) -> Request {
         return KvSet{gen(m), get_str(m, "key", kMaxKeyBytes), get_str(m, "value", kMaxValueBytes)};
       }},
      {KvGet::kType, [](const json& m) -> Request { return KvGet{gen(m), get_str(m, "key", kMaxKeyBytes)}; }},
      {KvWait::kType, [](const json& m) -> Request {
         return KvWait{gen(m), get_str(m, "key", kMaxKeyBytes), get_int(m, "timeout_ms", 0, kMaxWaitMs)};
       }},
      {KvCas::kType, decode_kv_cas},
      {FailureReport::kType, decode_failure},
      {PhaseTiming::kType, decode_phase},
      {Leave::kType, decode_leave},
      {Status::kType, [](const json&) -> Request { return Status{}; }},
      {Exited::kType, decode_exited},
      {StopJob::kType, [](const json&) -> Request { return StopJob{}; }},
      {Summary::kType, [](const json&) -> Request { return Summary{}; }},
      {Fatal::kType, decode_fatal},
      {Injected::kType, decode_injected},
  };
  return table;
}

Request decode(const json& m, const std::string& type) {
  const auto it = decoders().find(type);
  if (it == decoders().end()) throw ProtocolError(rf::str("unknown request type '", type, "'"));
  return it->second(m);
}

}  // namespace

const char* to_string(Role r) { return name_of(kRoleNames, r); }

Request decode_request(const json& m) {
  const std::string type = m.at("type").get<std::string>();
  try {
    return decode(m, type);
  } catch (const ProtocolError& e) {
    throw ProtocolError(rf::str("request '", type, "': ", e.what()));
  }
}

const char* request_name(const Request& r) {
  return std::visit([](const auto& q) { return std::decay_t<decltype(q)>::kType; }, r);
}

namespace {
template <class T>
json typed(const T&) { return json{{"type", T::kType}}; }
json opt_json(const auto& v) { return v ? json(*v) : json(nullptr); }
}  // namespace

json encode_request(const Heartbeat& r) {
  json j = typed(r);
  j["generation"] = r.generation;
  j["step"] = r.step;
  if (r.loss) j["loss"] = *r.loss;
  if (r.samples_per_s) j["samples_per_s"] = *r.samples_per_s;
  if (r.ckpt_failed) j["ckpt_failed"] = *r.ckpt_failed, j["ckpt_error"] = r.ckpt_error;
  const Activity& a = r.activity;
  if (a.kind != Activity::Idle || a.elapsed != Duration{} || a.runnable != Duration{} || a.frozen != Duration{} ||
      a.bound != Duration{} || !a.where.empty()) {
    const auto us = [](Duration d) { return std::chrono::duration_cast<std::chrono::microseconds>(d).count(); };
    j["activity"] = {{"kind", to_string(a.kind)}, {"elapsed_us", us(a.elapsed)}, {"runnable_us", us(a.runnable)},
                     {"bound_us", us(a.bound)}, {"where", a.where}};
    if (a.frozen != Duration{}) j["activity"]["frozen_us"] = us(a.frozen);
  }
  return j;
}

json encode_request(const Report& r) {
  json j = typed(r);
  j.update({{"round", r.round}, {"has_state", r.has_state}, {"step", r.step}, {"digest", r.digest},
            {"comm_generation", r.comm_generation}});
  return j;
}

json encode_request(const PlanRequest& r) {
  json j = typed(r);
  j.update({{"round", r.round}, {"timeout_ms", r.timeout_ms}});
  return j;
}

json encode_request(const Ready& r) {
  json j = typed(r);
  j.update({{"generation", r.generation}, {"timeout_ms", r.timeout_ms}});
  return j;
}

json encode_request(const KvSet& r) {
  json j = typed(r);
  j.update({{"generation", r.generation}, {"key", r.key}, {"value", r.value}});
  return j;
}

json encode_request(const KvGet& r) {
  json j = typed(r);
  j.update({{"generation", r.generation}, {"key", r.key}});
  return j;
}

json encode_request(const KvWait& r) {
  json j = typed(r);
  j.update({{"generation", r.generation}, {"key", r.key}, {"timeout_ms", r.timeout_ms}});
  return j;
}

json encode_request(const KvCas& r) {
  json j = typed(r);
  j.update({{"generation", r.generation}, {"key", r.key}, {"expected", opt_json(r.expected)}, {"desired", r.desired}});
  return j;
}

json encode_request(const FailureReport& r) {
  json j = typed(r);
  j.update({{"generation", r.generation}, {"step", r.step}, {"peer_slot", opt_json(r.peer_slot)}, {"cause", r.cause},
            {"kind", to_string(r.kind)}});
  return j;
}

json encode_request(const PhaseTiming& r) {
  json j = typed(r);
  j.update({{"generation", r.generation}, {"phase", to_string(r.phase)}, {"ms", r.ms}});
  return j;
}

json encode_request(const Leave& r) {
  json j = typed(r);
  if (r.step) j["step"] = *r.step;
  if (r.ckpt_failed) j["ckpt_failed"] = *r.ckpt_failed, j["ckpt_error"] = r.ckpt_error;
  return j;
}

json encode_request(const Fatal& r) {
  json j = typed(r);
  j["error"] = r.error;
  return j;
}

json encode_request(const Injected& r) {
  json j = typed(r);
  j.update({{"generation", r.generation}, {"step", r.step}, {"spec", r.spec}});
  return j;
}

json encode_request(const Exited& r) {
  json j = typed(r);
  j.update({{"slot", r.slot}, {"incarnation", r.incarnation}, {"status", r.status}, {"exited_wall_us", r.exited_wall_us}});
  return j;
}

json encode_request(const Status& r) { return typed(r); }
json encode_request(const StopJob& r) { return typed(r); }
json encode_request(const Summary& r) { return typed(r); }

}  // namespace rf::elastic
