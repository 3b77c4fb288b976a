#pragma once
// The coordinator's replies that clients act on, as typed structs decoded from a reply in
// one place (the mirror of messages.h's decode_request): the worker's (an answer, a plan,
// a ready, the store's, the heartbeat's) and the launcher's (status, exited, summary).
// Fields a client does not decide on stay in `raw` (the live line and --summary print them).
// Decoding is as lenient as the clients always were: a missing field takes its default; a
// present field of the wrong type, or a phase or a cause that names none, is a ProtocolError.
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "elastic/membership_types.h"

namespace rf::elastic {

// The member's welcome: the job as it joined it, and the lease it must keep (absent from a
// launcher's or a caller's welcome).
struct WelcomeReply {
  uint64_t generation = 0;
  std::optional<Phase> phase;
  int target_world = 0;
  std::optional<int64_t> heartbeat_ms, lease_ms;
};

struct HeartbeatReply {
  bool fenced = false;
  uint64_t generation = 0;
  std::optional<Phase> phase;
  bool reconfigure = false, stop = false, planned = false;
  std::optional<Cause> cause;  // the newest revocation's (nullopt: none; on the wire "" or absent)
};

// What the coordinator knew of a process the launcher saw exit.
struct ExitedReply {
  bool registered = false;  // its join was accepted at some point
  bool left = false;        // it had left the job gracefully (finished or stopped) first
  std::optional<Phase> phase;  // the job's phase after the exit
};

struct StatusReply {
  std::optional<Phase> phase;
  uint64_t generation = 0;
  int64_t step = -1;  // the furthest member's
  int recoveries = 0;  // finished so far
  std::vector<WorkerId> members, standby, evicted;  // evicted: every eviction so far, oldest first
  std::optional<std::string> error;  // why the job stopped (nullopt: the reply did not say)
  nlohmann::json raw = nlohmann::json::object();
};

struct SummaryReply {
  struct Recovery {
    bool finished = false;
    int64_t target_step = -1;
  };
  std::vector<Recovery> recoveries;
  nlohmann::json fired = nlohmann::json::array();  // the worker-side --inject specs that fired
  nlohmann::json raw = nlohmann::json::object();
};

// kv_get_reply and kv_wait_reply: the value, hex-encoded as on the wire (nullopt: not found,
// or for kv_wait not within its timeout).
struct KvValueReply {
  std::optional<std::string> value_hex;
};
struct KvCasReply {
  bool swapped = false;
  std::optional<std::string> value_hex;  // the value stored after the attempt (nullopt: none)
};

// report_reply, failure_reply, leave_reply and fatal_reply are an Answer (an unknown result
// word reads as Stopped); plan_reply a PlanQuery (its `timeout` status and any word it does
// not know read as Pending); ready_reply a ReadyQuery (`stale`, a round that is gone, reads
// as Revoked).
using Reply = std::variant<WelcomeReply, HeartbeatReply, ExitedReply, StatusReply, SummaryReply, Answer, PlanQuery, ReadyQuery,
                           KvValueReply, KvCasReply>;

// Decodes a reply by its `type`. Throws ProtocolError naming the reply and the field at
// fault, or the type when it is none of the above (an error reply is the caller's: the
// connection turns it into a typed exception before this).
Reply decode_reply(const nlohmann::json& m);

// The reply of type T, or ProtocolError when `m` is another one.
template <class T>
T decode_reply_as(const nlohmann::json& m);

// The coordinator's encoders: each reply above is built here and only here, the mirror of
// its decoder (status_reply and summary_reply, built from Membership's state, are in
// coordinator_replies.h). An optional field that is nullopt is left out, except a
// heartbeat reply's cause, "" when none. Pending reads "timeout" in a plan or ready reply.
nlohmann::json encode_reply(const WelcomeReply& r);
nlohmann::json encode_reply(const HeartbeatReply& r);
nlohmann::json encode_reply(const ExitedReply& r);
nlohmann::json encode_reply(const PlanQuery& q);  // with the plan when Ready
nlohmann::json encode_reply(const ReadyQuery& q);
nlohmann::json encode_reply(const KvCasReply& r);
// type: report_reply, failure_reply, leave_reply or fatal_reply.
nlohmann::json encode_answer(const char* type, const Answer& a);
// A ready refused at once (the round it names is not this worker's to run): the answer's
// result word is the status (stale reads back as Revoked).
nlohmann::json encode_ready_refusal(const Answer& a);
// type: kv_get_reply or kv_wait_reply.
nlohmann::json encode_kv_value(const char* type, const KvValueReply& r);

}  // namespace rf::elastic
