// A coordinator replica that takes over (several replicas on etcd): its Membership starts at
// the committed generation + 1 with a recovery round of the previous members (cause
// leader_changed) that keeps their ranks, so with the same W every batch splits as before.
#include <doctest/doctest.h>

#include "elastic/membership.h"
#include "tests/elastic/membership_sim.h"

using namespace rf::elastic;
using namespace rf::elastic::test;
using namespace std::chrono_literals;

namespace {

MembershipOptions taking_over(int w, uint64_t first, std::vector<WorkerId> previous) {
  MembershipOptions o = Sim::make(w, w);
  o.first_generation = first;
  o.previous_members = std::move(previous);
  return o;
}

}  // namespace

TEST_CASE("takeover: the round recovers the previous members at the next generation, ranks kept") {
  // Ranks of the old generation: slot 3 (a spare that replaced slot 1) holds rank 1.
  Sim s(taking_over(3, 8, {{0, 0}, {3, 0}, {2, 1}}));
  CHECK(s.m.phase() == Phase::Recovering);
  CHECK(s.m.generation() == 8);
  REQUIRE(s.m.recoveries().size() == 1);
  CHECK(s.m.recoveries()[0].cause == Cause::LeaderChanged);
  CHECK(s.m.recoveries()[0].from_generation == 7);
  // Workers rejoin in any order (they fenced when the old leader went) and report state at T.
  for (WorkerId w : {WorkerId{2, 1}, WorkerId{3, 0}, WorkerId{0, 0}}) {
    s.join(w);
    CHECK(s.report(w, 0, 41, "dT").ok());
  }
  REQUIRE(s.m.plan());
  CHECK(s.m.plan()->generation == 8);
  CHECK(s.m.plan()->target_step == 41);
  CHECK(slots_of(*s.m.plan()) == std::vector<int>{0, 3, 2});  // the old ranks, not slot order
  for (const auto& r : s.m.plan()->ranks) CHECK_FALSE(r.source_rank);  // all at T: no transfer
  s.ready_all();
  CHECK(s.m.phase() == Phase::Running);
  CHECK(s.m.recoveries()[0].finished);
  CHECK(s.m.recoveries()[0].generation == 8);
}

TEST_CASE("takeover: a previous member that does not come back is replaced like any lost worker") {
  Sim s(taking_over(2, 4, {{0, 0}, {1, 0}}));
  s.join({0, 0});
  s.report({0, 0}, 0, 10, "d10");
  // Slot 1 died with the old leader; its launcher restarts it as incarnation 1.
  s.join({1, 1});
  s.report_new({1, 1});
  REQUIRE(s.m.plan());
  CHECK(slots_of(*s.m.plan()) == std::vector<int>{0, 1});
  CHECK(s.m.plan()->ranks[1].source_rank == 0);  // it receives S_T from rank 0
}

TEST_CASE("takeover: without previous members (the job never ran) the first round forms as usual") {
  MembershipOptions o = Sim::make(2, 2);
  o.first_generation = 3;
  Sim s(o);
  CHECK(s.m.phase() == Phase::Forming);
  CHECK(s.m.generation() == 3);
  CHECK(s.m.recoveries().empty());
}
