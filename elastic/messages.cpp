#include "elastic/messages.h"

#include <iterator>

#include "base/str.h"
#include "elastic/frame.h"

namespace rf::elastic {

using nlohmann::json;

namespace {

constexpr int64_t kMaxGen = int64_t{1} << 53;
constexpr int64_t kMaxStep = int64_t{1} << 53;

uint64_t gen(const json& m, const char* key = "generation") {
  return static_cast<uint64_t>(get_int(m, key, 0, kMaxGen));
}

Request decode(const json& m, const std::string& type) {
  if (type == "hello") {
    Hello h;
    h.nonce = get_str(m, "nonce", 64);
    if (h.nonce.size() < 16) throw ProtocolError("field 'nonce' is shorter than 16 characters");
    const std::string role = get_str(m, "role", 32);
    if (role == "member") h.role = Role::Member;
    else if (role == "caller") h.role = Role::Caller;
    else if (role == "launcher") h.role = Role::Launcher;
    else if (role == "replica") h.role = Role::Replica;
    else throw ProtocolError(rf::str("field 'role' = '", role, "' is not member, caller, launcher or replica"));
    if (h.role == Role::Member || h.role == Role::Caller) {
      h.slot = static_cast<int>(get_int(m, "slot", 0, kMaxSlot));
      h.incarnation = get_int(m, "incarnation", 0, kMaxGen);
    }
    return h;
  }
  if (type == "auth") return Auth{get_str(m, "mac", 128)};
  if (type == "heartbeat") {
    Heartbeat h;
    h.generation = gen(m);
    h.step = get_int(m, "step", -1, kMaxStep);
    for (const char* key : {"loss", "samples_per_s"}) {
      if (!m.contains(key)) continue;
      const auto& v = m[key];
      if (!v.is_number() || !(v.get<double>() >= 0) || v.get<double>() > 1e30)
        throw ProtocolError(rf::str("field '", key, "' is not a number in [0, 1e30]"));
      (std::string(key) == "loss" ? h.loss : h.samples_per_s) = v.get<double>();
    }
    if ((h.ckpt_failed = get_opt_int(m, "ckpt_failed", 0, int64_t{1} << 53)) && m.contains("ckpt_error"))
      h.ckpt_error = get_str(m, "ckpt_error", kMaxTextBytes);
    if (m.contains("activity")) {
      const auto& a = m["activity"];
      if (!a.is_object()) throw ProtocolError("field 'activity' is not an object");
      const std::string kind = get_str(a, "kind", 16);
      if (kind == "idle") h.activity.kind = Activity::Idle;
      else if (kind == "compute") h.activity.kind = Activity::Compute;
      else if (kind == "wait") h.activity.kind = Activity::Wait;
      else throw ProtocolError(rf::str("field 'activity.kind' = '", kind, "' is not idle, compute or wait"));
      h.activity.elapsed = std::chrono::microseconds(get_int(a, "elapsed_us", 0, int64_t{1} << 53));
      h.activity.bound = std::chrono::microseconds(get_int(a, "bound_us", 0, int64_t{1} << 53));
      if (auto r = get_opt_int(a, "runnable_us", 0, int64_t{1} << 53)) h.activity.runnable = std::chrono::microseconds(*r);
      h.activity.where = get_str(a, "where", 64);
    }
    return h;
  }
  if (type == "report") {
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
  if (type == "plan") return PlanRequest{gen(m, "round"), get_int(m, "timeout_ms", 0, kMaxWaitMs)};
  if (type == "ready") return Ready{gen(m), get_int(m, "timeout_ms", 0, kMaxWaitMs)};
  if (type == "kv_set") return KvSet{gen(m), get_str(m, "key", kMaxKeyBytes), get_str(m, "value", kMaxValueBytes)};
  if (type == "kv_get") return KvGet{gen(m), get_str(m, "key", kMaxKeyBytes)};
  if (type == "kv_wait")
    return KvWait{gen(m), get_str(m, "key", kMaxKeyBytes), get_int(m, "timeout_ms", 0, kMaxWaitMs)};
  if (type == "kv_cas")
    return KvCas{gen(m), get_str(m, "key", kMaxKeyBytes), get_opt_str(m, "expected", kMaxValueBytes),
                 get_str(m, "desired", kMaxValueBytes)};
  if (type == "failure") {
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
  if (type == "phase") {
    PhaseTiming p;
    p.generation = gen(m);
    p.phase = get_str(m, "phase", 32);
    if (p.phase != "connect" && p.phase != "transfer" && p.phase != "verify")
      throw ProtocolError(rf::str("field 'phase' = '", p.phase, "' is not connect, transfer or verify"));
    auto it = m.find("ms");
    if (it == m.end() || !it->is_number()) throw ProtocolError("field 'ms' must be a number");
    p.ms = it->get<double>();
    if (!(p.ms >= 0 && p.ms < 1e9)) throw ProtocolError("field 'ms' is outside [0, 1e9)");
    return p;
  }
  if (type == "leave") {
    Leave l{get_opt_int(m, "step", -1, kMaxStep), get_opt_int(m, "ckpt_failed", 0, int64_t{1} << 53), ""};
    if (l.ckpt_failed && m.contains("ckpt_error")) l.ckpt_error = get_str(m, "ckpt_error", kMaxTextBytes);
    return l;
  }
  if (type == "status") return Status{};
  if (type == "exited")
    return Exited{static_cast<int>(get_int(m, "slot", 0, kMaxSlot)), get_int(m, "incarnation", 0, kMaxGen),
                  static_cast<int>(get_int(m, "status", -1'000'000, 1'000'000)),
                  get_int(m, "exited_wall_us", 0, INT64_MAX)};
  if (type == "stop") return StopJob{};
  if (type == "summary") return Summary{};
  if (type == "fatal") {
    Fatal f{get_str(m, "error", kMaxTextBytes)};
    if (f.error.empty()) throw ProtocolError("field 'error' must not be empty");
    return f;
  }
  if (type == "injected") {
    Injected i{gen(m), get_int(m, "step", -1, kMaxStep), get_str(m, "spec", kMaxKeyBytes)};
    if (i.spec.empty()) throw ProtocolError("field 'spec' must not be empty");
    return i;
  }
  throw ProtocolError(rf::str("unknown request type '", type, "'"));
}

}  // namespace

Request decode_request(const json& m) {
  const std::string type = m.at("type").get<std::string>();
  try {
    return decode(m, type);
  } catch (const ProtocolError& e) {
    throw ProtocolError(rf::str("request '", type, "': ", e.what()));
  }
}

const char* request_name(const Request& r) {
  static const char* names[] = {"hello", "auth", "heartbeat", "report", "plan", "ready", "kv_set", "kv_get", "kv_wait",
                                "kv_cas", "failure", "phase", "leave", "status", "exited", "stop", "summary", "fatal",
                                "injected"};
  static_assert(std::size(names) == std::variant_size_v<Request>, "one name per Request alternative, in order");
  return names[r.index()];
}

}  // namespace rf::elastic
