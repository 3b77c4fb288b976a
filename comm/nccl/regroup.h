#pragma once
// Shrink or fresh init: how the NCCL communicator of the next generation is formed from the
// previous one's (docs/design.md, "Backends"). Pure: members are opaque names (the trainer
// passes each worker's identity, e.g. slot and incarnation, so a restarted worker is a new
// member), in rank order.
//
// ncclCommShrink removes ranks from a communicator and renumbers the rest in their old
// order, without a new unique id or a bootstrap round. It fits exactly when the next
// generation's members are the previous ones with at least one removed and the order
// kept, and the previous communicator still exists (revoked with ncclCommRevoke, not
// destroyed by ncclCommAbort). Anything else — a member joins (a restarted worker too),
// the order changes, nobody leaves (the same members again, e.g. after a stall), no
// previous communicator — is a fresh ncclCommInitRankConfig from the generation's unique
// id (comm/nccl/unique_id.h).
#include <string>
#include <vector>

#include "base/enum_names.h"

namespace rf::comm::nccl {

struct RegroupPlan {
  enum class Kind { shrink, fresh_init };
  Kind kind = Kind::fresh_init;
  // shrink: the previous ranks to pass to ncclCommShrink's excludeRanksList, ascending.
  std::vector<int> excluded;
  // shrink: for each previous rank its rank in the next generation, -1 if excluded.
  std::vector<int> new_rank;
  std::string reason;  // why this kind, for the log ("ranks 2 left", "worker w9 joins")
};

// Throws rf::InvalidInput when either list is empty or names a member twice.
RegroupPlan plan_regroup(const std::vector<std::string>& previous, const std::vector<std::string>& next,
                         bool previous_communicator_usable);

inline constexpr EnumName<RegroupPlan::Kind> kRegroupKindNames[] = {{RegroupPlan::Kind::shrink, "shrink"},
                                                                     {RegroupPlan::Kind::fresh_init, "fresh init"}};
static_assert(lists_each_once(kRegroupKindNames));
const char* regroup_kind_name(RegroupPlan::Kind k);  // "shrink", "fresh init"

}  // namespace rf::comm::nccl
