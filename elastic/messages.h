#pragma once
// The requests of the coordinator protocol as typed structs, decoded from a checked frame
// (frame.h) in one place: every field is validated and typed here, so the server's
// handlers never touch raw JSON. Replies are JSON objects built by the server
// ({"type": "<request>_reply" or "error", ...}); the ones clients act on are decoded into
// typed structs by decode_reply (elastic/replies.h). docs/elastic.md lists them all.
// A connection says hello first (role and a nonce), answers the challenge with auth
// (elastic/auth.h: the job token never crosses the wire), then sends one request at a time
// and waits for its reply (plan, ready and kv_wait may be held until their deadline).
#include <cstdint>
#include <optional>
#include <string>
#include <variant>

#include <nlohmann/json.hpp>

#include "base/enum_names.h"
#include "elastic/membership_types.h"

namespace rf::elastic {

inline constexpr size_t kMaxKeyBytes = 256;
inline constexpr size_t kMaxValueBytes = 512u << 10;  // hex of a 256 KiB blob
inline constexpr size_t kMaxTextBytes = 4096;
inline constexpr int64_t kMaxSlot = 1'000'000;
inline constexpr int64_t kMaxWaitMs = 3'600'000;

// Replica: a standby coordinator replica watching the leader (docs/control-plane.md); it
// sends nothing after its hello, and the leader's process ending closes its connection.
enum class Role { Member, Caller, Launcher, Replica };
inline constexpr EnumName<Role> kRoleNames[] = {
    {Role::Member, "member"}, {Role::Caller, "caller"}, {Role::Launcher, "launcher"}, {Role::Replica, "replica"}};
static_assert(lists_each_once(kRoleNames));
const char* to_string(Role r);  // member, caller, launcher, replica: the hello's word

struct Hello {
  static constexpr const char* kType = "hello";
  std::string nonce;
  Role role;
  int slot = -1;
  int64_t incarnation = 0;
};
struct Auth {
  static constexpr const char* kType = "auth";
  std::string mac;  // HMAC-SHA256 over the challenge (elastic/auth.h), hex
};
// `activity` (optional on the wire: absent = idle) says what the training thread does,
// for the coordinator's judgement of stuck members (elastic/liveness.h).
// loss and samples_per_s (optional): the live line's figures (elastic/client.h set_progress).
// ckpt_failed (optional, with ckpt_error; in a leave too): a checkpoint writer's disk
// checkpoints that could not be written so far, and the last error (checkpoint_health.h).
struct Heartbeat {
  static constexpr const char* kType = "heartbeat";
  uint64_t generation = 0;
  int64_t step = -1;
  Activity activity;
  std::optional<double> loss, samples_per_s;
  std::optional<int64_t> ckpt_failed;
  std::string ckpt_error;
};
// comm_generation (optional: absent = 0): StateReport::comm_generation.
struct Report {
  static constexpr const char* kType = "report";
  uint64_t round = 0;
  bool has_state = false;
  int64_t step = -1;
  std::string digest;
  uint64_t comm_generation = 0;
};
struct PlanRequest {
  static constexpr const char* kType = "plan";
  uint64_t round = 0;
  int64_t timeout_ms = 0;
};
struct Ready {
  static constexpr const char* kType = "ready";
  uint64_t generation = 0;
  int64_t timeout_ms = 0;
};
struct KvSet {
  static constexpr const char* kType = "kv_set";
  uint64_t generation = 0;
  std::string key, value;
};
struct KvGet {
  static constexpr const char* kType = "kv_get";
  uint64_t generation = 0;
  std::string key;
};
struct KvWait {
  static constexpr const char* kType = "kv_wait";
  uint64_t generation = 0;
  std::string key;
  int64_t timeout_ms = 0;
};
struct KvCas {
  static constexpr const char* kType = "kv_cas";
  uint64_t generation = 0;
  std::string key;
  std::optional<std::string> expected;
  std::string desired;
};
// kind (optional: absent = comm; a word that names no FailureKind is a protocol error).
struct FailureReport {
  static constexpr const char* kType = "failure";
  uint64_t generation = 0;
  int64_t step = -1;
  std::optional<int> peer_slot;
  std::string cause;
  FailureKind kind = FailureKind::comm;
};
// phase: a word that names no RecoveryPhase is a protocol error.
struct PhaseTiming {
  static constexpr const char* kType = "phase";
  uint64_t generation = 0;
  RecoveryPhase phase = RecoveryPhase::Connect;
  double ms = 0;
};
struct Leave {
  static constexpr const char* kType = "leave";
  std::optional<int64_t> step;  // the last step it applied (absent: unknown)
  std::optional<int64_t> ckpt_failed;  // as in Heartbeat: the count at the end
  std::string ckpt_error;
};
// The worker cannot run for a reason every worker and every restart would meet again (its
// configuration, e.g. a --ckpt-dir holding another run's checkpoints): STOP the job with it.
struct Fatal { static constexpr const char* kType = "fatal"; std::string error; };
// A worker is about to fire an --inject `step=` spec (it tells the coordinator first, so
// the launcher can say which specs never fired even when their step was reached).
struct Injected {
  static constexpr const char* kType = "injected";
  uint64_t generation = 0;
  int64_t step = -1;
  std::string spec;
};
struct Status { static constexpr const char* kType = "status"; };
struct Exited {
  static constexpr const char* kType = "exited";
  int slot = -1;
  int64_t incarnation = 0;
  int status = 0;
  int64_t exited_wall_us = 0;
};
struct StopJob { static constexpr const char* kType = "stop"; };
struct Summary { static constexpr const char* kType = "summary"; };

using Request = std::variant<Hello, Auth, Heartbeat, Report, PlanRequest, Ready, KvSet, KvGet, KvWait, KvCas,
                             FailureReport, PhaseTiming, Leave, Status, Exited, StopJob, Summary, Fatal, Injected>;

// Decodes a message already checked by parse_message(). Throws ProtocolError naming
// the request type and the field at fault.
Request decode_request(const nlohmann::json& m);

// The request's wire `type` (each request struct's kType).
const char* request_name(const Request& r);

// The clients' encoders: each request after admission is built here and only here, the
// mirror of its decoder (hello and auth are authenticate's, elastic/auth.h). An optional
// field that is nullopt is left out (kv_cas's expected and failure's peer_slot are null),
// and so is a heartbeat's activity when it is the default one (idle, nothing known), as
// absent reads as that.
nlohmann::json encode_request(const Heartbeat& r);
nlohmann::json encode_request(const Report& r);
nlohmann::json encode_request(const PlanRequest& r);
nlohmann::json encode_request(const Ready& r);
nlohmann::json encode_request(const KvSet& r);
nlohmann::json encode_request(const KvGet& r);
nlohmann::json encode_request(const KvWait& r);
nlohmann::json encode_request(const KvCas& r);
nlohmann::json encode_request(const FailureReport& r);
nlohmann::json encode_request(const PhaseTiming& r);
nlohmann::json encode_request(const Leave& r);
nlohmann::json encode_request(const Fatal& r);
nlohmann::json encode_request(const Injected& r);
nlohmann::json encode_request(const Status& r);
nlohmann::json encode_request(const Exited& r);
nlohmann::json encode_request(const StopJob& r);
nlohmann::json encode_request(const Summary& r);

}  // namespace rf::elastic
