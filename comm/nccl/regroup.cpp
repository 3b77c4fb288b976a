#include "comm/nccl/regroup.h"

#include <unordered_map>
#include <unordered_set>

#include "base/error.h"
#include "base/str.h"

namespace rf::comm::nccl {

namespace {

void check_members(const std::vector<std::string>& m, const char* which) {
  if (m.empty()) throw rf::InvalidInput(rf::str("NCCL regroup: the ", which, " generation has no members"));
  std::unordered_set<std::string> seen;
  for (size_t r = 0; r < m.size(); ++r) {
    if (!seen.insert(m[r]).second) {
      throw rf::InvalidInput(rf::str("NCCL regroup: the ", which, " generation names member '", m[r],
                                     "' twice (rank ", r, ")"));
    }
  }
}

std::string join(const std::vector<int>& v) {
  std::string s;
  for (size_t k = 0; k < v.size(); ++k) s += (k ? ", " : "") + std::to_string(v[k]);
  return s;
}

}  // namespace

RegroupPlan plan_regroup(const std::vector<std::string>& previous, const std::vector<std::string>& next,
                         bool previous_communicator_usable) {
  check_members(previous, "previous");
  check_members(next, "next");
  RegroupPlan plan;
  std::unordered_map<std::string, int> old_rank;
  for (size_t r = 0; r < previous.size(); ++r) old_rank.emplace(previous[r], static_cast<int>(r));
  for (const std::string& m : next) {
    if (!old_rank.count(m)) {
      plan.reason = rf::str("member '", m, "' joins");
      return plan;
    }
  }
  // Every next member was a previous one: a shrink if they keep their relative order.
  plan.new_rank.assign(previous.size(), -1);
  int last_old = -1;
  for (size_t r = 0; r < next.size(); ++r) {
    const int o = old_rank.at(next[r]);
    if (o < last_old) {
      plan.new_rank.clear();
      plan.reason = rf::str("the order changes (member '", next[r], "' was rank ", o, ", before rank ", last_old, ")");
      return plan;
    }
    last_old = o;
    plan.new_rank[o] = static_cast<int>(r);
  }
  for (size_t o = 0; o < previous.size(); ++o) {
    if (plan.new_rank[o] < 0) plan.excluded.push_back(static_cast<int>(o));
  }
  if (plan.excluded.empty()) {
    plan.new_rank.clear();
    plan.reason = "the same members in the same order: nobody leaves, so nothing to shrink";
    return plan;
  }
  if (!previous_communicator_usable) {
    plan.excluded.clear();
    plan.new_rank.clear();
    plan.reason = "no previous communicator to shrink (it was aborted or never formed)";
    return plan;
  }
  plan.kind = RegroupPlan::Kind::shrink;
  plan.reason = rf::str("rank", plan.excluded.size() > 1 ? "s " : " ", join(plan.excluded),
                        plan.excluded.size() > 1 ? " leave" : " leaves");
  return plan;
}

const char* regroup_kind_name(RegroupPlan::Kind k) { return name_of(kRegroupKindNames, k); }

}  // namespace rf::comm::nccl
