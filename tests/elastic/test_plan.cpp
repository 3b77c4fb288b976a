// make_plan (docs/protocol.md step 4) on its own: T, digest agreement, ranks and sources.
#include <doctest/doctest.h>

#include "elastic/plan.h"

using namespace rf::elastic;

namespace {
Reporter rep(int slot, int64_t inc, int64_t step, const std::string& d, uint64_t order = 0) {
  return {{slot, inc}, StateReport{true, step, d}, order};
}
Reporter fresh(int slot, int64_t inc, uint64_t order = 0) { return {{slot, inc}, StateReport{}, order}; }
}  // namespace

TEST_CASE("T is the largest step; those behind and new workers get a source, round-robin over holders") {
  auto out = make_plan(5, {0, 1, 2, 3}, {rep(0, 0, 9, "a"), rep(1, 0, 9, "a"), rep(2, 0, 8, "b"), fresh(3, 2)}, 4);
  REQUIRE(out.plan);
  const Plan& p = *out.plan;
  CHECK(p.target_step == 9);
  CHECK(p.target_digest == "a");
  CHECK_FALSE(p.fresh_start);
  CHECK(p.ranks[2].source_rank == 0);
  CHECK(p.ranks[3].source_rank == 1);
  CHECK_FALSE(p.ranks[0].source_rank);
}

TEST_CASE("digest mismatch names every holder of T") {
  auto out = make_plan(2, {0, 1, 2}, {rep(0, 0, 3, "aa"), rep(1, 4, 3, "bb"), rep(2, 0, 2, "cc")}, 3);
  CHECK_FALSE(out.plan);
  CHECK(out.error.find("slot 0 incarnation 0 digest 'aa'") != std::string::npos);
  CHECK(out.error.find("slot 1 incarnation 4 digest 'bb'") != std::string::npos);
  CHECK(out.error.find("cc") == std::string::npos);  // behind T: not part of the check
}

TEST_CASE("digests of two versions are never compared: the round stops naming who reported which") {
  const std::string x3 = "x3:99aa06d3014798d86001c324468d497f";
  const std::string old = "99aa06d3014798d86001c324468d497f";  // the same hex, no version
  auto out = make_plan(2, {0, 1, 2}, {rep(0, 0, 3, x3), rep(1, 0, 3, old), rep(2, 0, 2, x3)}, 3);
  CHECK_FALSE(out.plan);
  CHECK(out.error.find("2 versions") != std::string::npos);
  CHECK(out.error.find("slot 0 incarnation 0 version 'x3'") != std::string::npos);
  CHECK(out.error.find("slot 1 incarnation 0 version 'none'") != std::string::npos);
  // A worker behind T of another version is refused too: it would receive T's state from
  // a source whose digest it cannot check.
  auto behind = make_plan(2, {0, 1}, {rep(0, 0, 3, x3), rep(1, 0, 2, old)}, 2);
  CHECK_FALSE(behind.plan);
  CHECK(behind.error.find("slot 1 incarnation 0 version 'none'") != std::string::npos);
  auto same = make_plan(2, {0, 1}, {rep(0, 0, 3, x3), rep(1, 0, 3, x3), fresh(2, 1)}, 3);
  CHECK(same.plan);
}

TEST_CASE("a spare fills the hole of a lost worker; holders of T are preferred") {
  auto out = make_plan(3, {0, 1, 2}, {rep(0, 0, 4, "x"), rep(2, 0, 4, "x"), fresh(7, 0, 1), rep(8, 0, 4, "x", 2)}, 3);
  REQUIRE(out.plan);
  CHECK(out.plan->ranks[1].worker.slot == 8);  // holds T: no transfer needed
  CHECK(out.plan->world() == 3);
}

TEST_CASE("shrink keeps the survivors' order; extra reporters beyond W stay out") {
  auto shrink = make_plan(3, {4, 2, 0}, {rep(0, 0, 1, "x"), rep(4, 0, 1, "x")}, 3);
  REQUIRE(shrink.plan);
  CHECK(shrink.plan->ranks[0].worker.slot == 4);
  CHECK(shrink.plan->ranks[1].worker.slot == 0);
  auto cap = make_plan(1, {}, {fresh(3, 0), fresh(1, 0), fresh(2, 0)}, 2);
  REQUIRE(cap.plan);
  CHECK(cap.plan->world() == 2);
  CHECK(cap.plan->ranks[0].worker.slot == 1);
  CHECK(cap.plan->ranks[1].worker.slot == 2);
  CHECK(cap.plan->fresh_start);
  CHECK_FALSE(cap.plan->ranks[0].source_rank);
}

// decide_shrink_from: every rank of the plan shrinks generation g's communicator only when
// the plan is g's members with some removed, in g's order, each still holding g's.
namespace {
Plan plan_of(const std::vector<std::pair<WorkerId, uint64_t>>& ranks) {  // (worker, comm_generation)
  Plan p;
  for (size_t i = 0; i < ranks.size(); ++i) {
    StateReport r{true, 9, "a"};
    r.comm_generation = ranks[i].second;
    p.ranks.push_back({static_cast<int>(i), ranks[i].first, r, std::nullopt});
  }
  return p;
}
}  // namespace

TEST_CASE("shrink_from: a rank left, the others hold g's communicator in g's order: shrink g") {
  const std::vector<WorkerId> g4 = {{0, 0}, {1, 0}, {2, 0}};
  CHECK(decide_shrink_from(4, g4, plan_of({{{0, 0}, 4}, {{2, 0}, 4}})) == 4u);
  CHECK(decide_shrink_from(4, g4, plan_of({{{1, 0}, 4}, {{2, 0}, 4}})) == 4u);
  CHECK(decide_shrink_from(4, g4, plan_of({{{2, 0}, 4}})) == 4u);
  // ranks listed in any order: rank decides the position
  Plan p = plan_of({{{2, 0}, 4}, {{0, 0}, 4}});
  p.ranks[0].rank = 1, p.ranks[1].rank = 0;
  CHECK(decide_shrink_from(4, g4, p) == 4u);
}

TEST_CASE("shrink_from: a replacement, the same members, a rank without g's communicator, a new order: fresh") {
  const std::vector<WorkerId> g4 = {{0, 0}, {1, 0}, {2, 0}};
  // a replacement joins: slot 1 restarted is a new member (same slot, new incarnation)
  CHECK(decide_shrink_from(4, g4, plan_of({{{0, 0}, 4}, {{1, 1}, 0}, {{2, 0}, 4}})) == 0u);
  CHECK(decide_shrink_from(4, g4, plan_of({{{0, 0}, 4}, {{1, 1}, 4}})) == 0u);  // even if it said 4
  // a spare fills the hole
  CHECK(decide_shrink_from(4, g4, plan_of({{{0, 0}, 4}, {{3, 0}, 0}, {{2, 0}, 4}})) == 0u);
  // the same members again (a planned change, a failed recovery's next round)
  CHECK(decide_shrink_from(4, g4, plan_of({{{0, 0}, 4}, {{1, 0}, 4}, {{2, 0}, 4}})) == 0u);
  // one survivor reports 0 (its communicator was aborted, or it holds none), or another g
  CHECK(decide_shrink_from(4, g4, plan_of({{{0, 0}, 4}, {{2, 0}, 0}})) == 0u);
  CHECK(decide_shrink_from(4, g4, plan_of({{{0, 0}, 5}, {{2, 0}, 5}})) == 0u);
  // the order changed
  CHECK(decide_shrink_from(4, g4, plan_of({{{2, 0}, 4}, {{0, 0}, 4}})) == 0u);
  // a whole-job fresh start, or a first round: no generation ran
  CHECK(decide_shrink_from(0, {}, plan_of({{{0, 0}, 0}, {{1, 0}, 0}})) == 0u);
  CHECK(decide_shrink_from(0, g4, plan_of({{{0, 0}, 0}})) == 0u);
  CHECK(decide_shrink_from(4, g4, Plan{}) == 0u);
}
