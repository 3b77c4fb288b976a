#pragma once
// ControlState — what the leading coordinator replica commits to etcd (elastic/leadership.h)
// before any reply that depends on it leaves, and what a new leader continues from: the
// newest generation issued (the fencing token), its phase, members and plan, the job id,
// and who has led. Plus the names of the store's entries in etcd. Pure encoding, no I/O.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "elastic/membership_types.h"
#include "elastic/plan.h"

namespace rf::elastic {

struct LeaderTerm {
  std::string id;              // the replica
  uint64_t from_generation = 0;  // the first generation it could issue
  int64_t since_wall_us = 0;   // when it took over
};

struct ControlState {
  uint64_t generation = 0;  // the newest generation issued; 0: none yet
  std::optional<Phase> phase;  // nullopt: none committed yet
  std::string job_id;
  std::vector<WorkerId> members;  // of the running generation, in rank order
  nlohmann::json plan;            // the open round's plan, else the running one (null: none)
  std::string error;              // why the job stopped
  std::vector<LeaderTerm> leaders;  // oldest first; the last one leads
};

std::string encode_control_state(const ControlState& s);
// Throws rf::Error naming the field when the text is not a control state.
ControlState decode_control_state(const std::string& text);

// The store's entry (g, key) in etcd, relative to the job's prefix: "kv/<g, 20 digits>/<hex
// key>". The fixed width makes the entries of generations [a, b) one key range.
std::string kv_entry_key(uint64_t generation, const std::string& key);
std::string kv_scope_begin(uint64_t generation);  // "kv/<g, 20 digits>/"
inline constexpr const char* kKvPrefix = "kv/";
// (g, key) of an entry key; nullopt when it is not one.
std::optional<std::pair<uint64_t, std::string>> parse_kv_entry_key(const std::string& rel_key);

}  // namespace rf::elastic
