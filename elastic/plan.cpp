#include "elastic/plan.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/digest.h"
#include "base/str.h"

namespace rf::elastic {

const PlanRank* Plan::find(int slot) const {
  for (const auto& r : ranks)
    if (r.worker.slot == slot) return &r;
  return nullptr;
}

namespace {

// T: the newest step any reporter holds (nullopt: nobody holds state, a fresh start).
std::optional<int64_t> newest_step(const std::vector<Reporter>& reporters) {
  std::optional<int64_t> t;
  for (const auto& r : reporters)
    if (r.report.has_state) t = t ? std::max(*t, r.report.step) : r.report.step;
  return t;
}

// Digests of two versions (two ringfence builds in one job) say nothing about each other:
// refuse to compare them, and name who reported which. "" when all are of one version.
std::string mixed_versions(uint64_t generation, const std::vector<Reporter>& reporters) {
  std::map<std::string, std::vector<const Reporter*>> by_version;
  for (const auto& r : reporters)
    if (r.report.has_state) by_version[std::string(rf::digest_version(r.report.digest))].push_back(&r);
  if (by_version.size() <= 1) return "";
  std::string msg = rf::str("digests of ", by_version.size(), " versions in the round for generation ", generation,
                            ": they cannot be compared, the job stops (run one ringfence build in the whole job):");
  for (const auto& [version, rs] : by_version)
    for (const Reporter* r : rs)
      msg += rf::str(" slot ", r->worker.slot, " incarnation ", r->worker.incarnation, " version '", version,
                     "' digest '", r->report.digest, "';");
  msg.pop_back();
  return msg;
}

// Step 4: all holders of T must agree, or we refuse to go on. Sets the plan's digest of T;
// returns the error ("" when they agree).
template <class HoldsT>
std::string agree_on_digest(Plan& plan, const std::vector<Reporter>& reporters, const HoldsT& holds_t) {
  std::map<std::string, std::vector<const Reporter*>> by_digest;
  for (const auto& r : reporters)
    if (holds_t(r)) by_digest[r.report.digest].push_back(&r);
  if (by_digest.size() > 1) {
    std::string msg = rf::str("digest mismatch at step ", plan.target_step, " in the round for generation ",
                              plan.generation, ": replicas diverged, the job stops (docs/protocol.md step 4):");
    for (const auto& [digest, rs] : by_digest)
      for (const Reporter* r : rs)
        msg += rf::str(" slot ", r->worker.slot, " incarnation ", r->worker.incarnation, " digest '", digest, "';");
    msg.pop_back();
    return msg;
  }
  plan.target_digest = by_digest.begin()->first;
  return "";
}

// Ranks in order. Holes left by lost workers are filled first by holders of T (no transfer
// needed), then by earlier joiners; at most target_world of them.
template <class HoldsT>
std::vector<const Reporter*> rank_order(const std::vector<int>& prev_slots, const std::vector<Reporter>& reporters,
                                        int target_world, const HoldsT& holds_t) {
  std::vector<const Reporter*> unassigned;
  for (const auto& r : reporters) unassigned.push_back(&r);
  std::stable_sort(unassigned.begin(), unassigned.end(), [&](const Reporter* a, const Reporter* b) {
    if (prev_slots.empty()) return a->worker.slot < b->worker.slot;  // forming: by slot
    if (holds_t(*a) != holds_t(*b)) return holds_t(*a);
    return a->join_order < b->join_order;
  });
  auto take_slot = [&](int slot) -> const Reporter* {
    for (auto it = unassigned.begin(); it != unassigned.end(); ++it)
      if ((*it)->worker.slot == slot) {
        const Reporter* r = *it;
        unassigned.erase(it);
        return r;
      }
    return nullptr;
  };
  std::vector<const Reporter*> order(prev_slots.size(), nullptr);
  for (size_t i = 0; i < prev_slots.size(); ++i) order[i] = take_slot(prev_slots[i]);
  for (auto& pos : order)
    if (!pos && !unassigned.empty()) {
      pos = unassigned.front();
      unassigned.erase(unassigned.begin());
    }
  std::erase(order, nullptr);  // holes nobody fills: the group shrinks, order kept
  for (const Reporter* r : unassigned) order.push_back(r);
  if (static_cast<int>(order.size()) > target_world) order.resize(static_cast<size_t>(target_world));
  return order;
}

}  // namespace

PlanOutcome make_plan(uint64_t generation, const std::vector<int>& prev_slots,
                      const std::vector<Reporter>& reporters, int target_world) {
  PlanOutcome out;
  Plan plan;
  plan.generation = generation;
  const std::optional<int64_t> t = newest_step(reporters);
  const bool any_state = t.has_value();
  if (t) plan.target_step = *t;
  plan.fresh_start = !any_state;
  auto holds_t = [&](const Reporter& r) {
    return any_state && r.report.has_state && r.report.step == plan.target_step;
  };
  out.error = mixed_versions(generation, reporters);
  if (out.error.empty() && any_state) out.error = agree_on_digest(plan, reporters, holds_t);
  if (!out.error.empty()) return out;

  const std::vector<const Reporter*> order = rank_order(prev_slots, reporters, target_world, holds_t);
  std::vector<int> holder_ranks;
  for (size_t i = 0; i < order.size(); ++i) {
    plan.ranks.push_back(PlanRank{static_cast<int>(i), order[i]->worker, order[i]->report, std::nullopt});
    if (holds_t(*order[i])) holder_ranks.push_back(static_cast<int>(i));
  }
  if (any_state && holder_ranks.empty()) {
    // Every holder of T was left standby: cannot happen with holders sorted first, but
    // a plan without a source would lose state, so say so rather than guess.
    out.error = rf::str("no worker holding step ", plan.target_step, " fits in the world of ", target_world);
    return out;
  }
  size_t next = 0;
  for (auto& pr : plan.ranks)
    if (any_state && !(pr.report.has_state && pr.report.step == plan.target_step))
      pr.source_rank = holder_ranks[next++ % holder_ranks.size()];
  out.plan = std::move(plan);
  return out;
}

uint64_t decide_shrink_from(uint64_t last_generation, const std::vector<WorkerId>& last_members, const Plan& plan) {
  if (last_generation == 0 || plan.ranks.empty() || plan.ranks.size() >= last_members.size()) return 0;
  std::vector<const PlanRank*> by_rank;
  for (const auto& pr : plan.ranks) by_rank.push_back(&pr);
  std::sort(by_rank.begin(), by_rank.end(), [](const PlanRank* a, const PlanRank* b) { return a->rank < b->rank; });
  // The plan's ranks must be a subsequence of last_members (distinct members, so fewer of
  // them means at least one left), each holding that generation's communicator.
  size_t next = 0;
  for (const PlanRank* pr : by_rank) {
    if (pr->report.comm_generation != last_generation) return 0;
    while (next < last_members.size() && !(last_members[next] == pr->worker)) ++next;
    if (next == last_members.size()) return 0;  // not a member of it, or out of its order
    ++next;
  }
  return last_generation;
}

}  // namespace rf::elastic
