// Shrink or fresh init for the next generation's NCCL communicator (comm/nccl/regroup.h).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "base/error.h"
#include "comm/nccl/regroup.h"

using namespace rf::comm::nccl;
using Kind = RegroupPlan::Kind;
using Names = std::vector<std::string>;

namespace {
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("only ranks leave: shrink, excluding them, the rest renumbered in their old order") {
  const RegroupPlan p = plan_regroup({"w0", "w1", "w2", "w3", "w4"}, {"w0", "w2", "w4"}, true);
  CHECK(p.kind == Kind::shrink);
  CHECK(p.excluded == std::vector<int>{1, 3});
  CHECK(p.new_rank == std::vector<int>{0, -1, 1, -1, 2});
  CHECK_MESSAGE(p.reason == "ranks 1, 3 leave", p.reason);
  const RegroupPlan one = plan_regroup({"a", "b", "c", "d"}, {"a", "b", "c"}, true);
  CHECK(one.kind == Kind::shrink);
  CHECK(one.excluded == std::vector<int>{3});
  CHECK(one.new_rank == std::vector<int>{0, 1, 2, -1});
  CHECK(one.reason == "rank 3 leaves");
  const RegroupPlan first = plan_regroup({"a", "b"}, {"b"}, true);  // rank 0 leaves: b becomes 0
  CHECK(first.kind == Kind::shrink);
  CHECK(first.excluded == std::vector<int>{0});
  CHECK(first.new_rank == std::vector<int>{-1, 0});
  CHECK(std::string(regroup_kind_name(first.kind)) == "shrink");
}

TEST_CASE("anyone joins, a restarted worker included: fresh init") {
  const RegroupPlan p = plan_regroup({"w0", "w1", "w2"}, {"w0", "w1", "w2", "w3"}, true);
  CHECK(p.kind == Kind::fresh_init);
  CHECK(p.excluded.empty());
  CHECK(p.new_rank.empty());
  CHECK_MESSAGE(has(p.reason, "'w3' joins"), p.reason);
  // Rank 2 was restarted: a new incarnation is a new member, even with fewer ranks.
  const RegroupPlan r = plan_regroup({"0:1", "1:1", "2:1"}, {"0:1", "2:2"}, true);
  CHECK(r.kind == Kind::fresh_init);
  CHECK_MESSAGE(has(r.reason, "'2:2' joins"), r.reason);
  CHECK(std::string(regroup_kind_name(r.kind)) == "fresh init");
}

TEST_CASE("the order changes: fresh init, even when nobody joins") {
  const RegroupPlan p = plan_regroup({"a", "b", "c"}, {"a", "c", "b"}, true);
  CHECK(p.kind == Kind::fresh_init);
  CHECK(p.new_rank.empty());
  CHECK_MESSAGE(has(p.reason, "order changes"), p.reason);
  CHECK(plan_regroup({"a", "b", "c"}, {"c", "a"}, true).kind == Kind::fresh_init);
}

TEST_CASE("nobody leaves, or no previous communicator to shrink: fresh init") {
  const RegroupPlan same = plan_regroup({"a", "b"}, {"a", "b"}, true);
  CHECK(same.kind == Kind::fresh_init);
  CHECK_MESSAGE(has(same.reason, "nobody leaves"), same.reason);
  const RegroupPlan gone = plan_regroup({"a", "b", "c"}, {"a", "c"}, false);
  CHECK(gone.kind == Kind::fresh_init);
  CHECK(gone.excluded.empty());
  CHECK_MESSAGE(has(gone.reason, "no previous communicator"), gone.reason);
}

TEST_CASE("empty or duplicated member lists are refused, naming the list and the member") {
  auto error_of = [](const Names& prev, const Names& next) -> std::string {
    try {
      (void)plan_regroup(prev, next, true);
    } catch (const rf::InvalidInput& e) {
      return e.what();
    }
    return "(no rf::InvalidInput)";
  };
  CHECK(has(error_of({}, {"a"}), "previous generation has no members"));
  CHECK(has(error_of({"a"}, {}), "next generation has no members"));
  const std::string dup = error_of({"a", "b"}, {"b", "b"});
  CHECK_MESSAGE(has(dup, "next generation names member 'b' twice (rank 1)"), dup);
  CHECK(has(error_of({"a", "a"}, {"a"}), "previous generation names member 'a' twice"));
}
