// The control state a leading coordinator replica commits to etcd, and the names of the
// store's entries there (elastic/control_state.h).
#include <doctest/doctest.h>

#include "elastic/control_state.h"
#include "elastic/coordinator_replies.h"

using namespace rf::elastic;

TEST_CASE("the control state round-trips, and a bad one is refused naming what is wrong") {
  const ControlState s{7, Phase::Running, std::string("j"), {{0, 0}, {3, 2}}, nlohmann::json{{"generation", 7}},
                       std::string(), {{"c0", 1, 100}, {"c1", 5, 200}}};
  const ControlState d = decode_control_state(encode_control_state(s));
  CHECK(d.generation == 7);
  CHECK(d.phase == Phase::Running);
  CHECK_THROWS_WITH(decode_control_state("{\"generation\":1,\"phase\":\"WALKING\"}"), doctest::Contains("unknown phase"));
  CHECK(d.job_id == "j");
  REQUIRE(d.members.size() == 2);
  CHECK(d.members[1] == WorkerId{3, 2});
  CHECK(d.plan["generation"] == 7);
  REQUIRE(d.leaders.size() == 2);
  CHECK(d.leaders[1].id == "c1");
  CHECK(d.leaders[1].from_generation == 5);
  CHECK_THROWS_WITH(decode_control_state("[]"), doctest::Contains("not a JSON object"));
  CHECK_THROWS_WITH(decode_control_state("{\"phase\":\"RUNNING\"}"), doctest::Contains("no generation"));
  CHECK_THROWS_WITH(decode_control_state("{\"generation\":1,\"members\":[[1]]}"),
                    doctest::Contains("[slot, incarnation]"));
}

TEST_CASE("store entries: (g, key) names that sort by generation, so older scopes are one range") {
  const std::string k = kv_entry_key(12, "addr/0");
  CHECK(k.rfind(kv_scope_begin(12), 0) == 0);
  const auto back = parse_kv_entry_key(k);
  REQUIRE(back.has_value());
  CHECK(back->first == 12u);
  CHECK(back->second == "addr/0");
  // Every entry of g in [1, 12) lies in [scope(1), scope(12)); g 0 and g 12 do not.
  CHECK(kv_entry_key(11, "x") < kv_scope_begin(12));
  CHECK(kv_entry_key(1, "x") >= kv_scope_begin(1));
  CHECK(kv_entry_key(0, "x") < kv_scope_begin(1));
  CHECK(kv_entry_key(12, "") >= kv_scope_begin(12));
  CHECK(kv_entry_key(9, "x") < kv_entry_key(10, "x"));  // fixed width: 9 before 10
  CHECK_FALSE(parse_kv_entry_key("state").has_value());
  CHECK_FALSE(parse_kv_entry_key("kv/12/x").has_value());
  std::string not_hex = kv_scope_begin(3);
  not_hex.append("zz");
  CHECK_FALSE(parse_kv_entry_key(not_hex).has_value());
}

TEST_CASE("a plan's shrink_from goes wherever the plan goes: the plan reply and the control state") {
  Plan p;
  p.generation = 5;
  p.target_step = 9;
  p.job_id = std::string("job-j");
  p.shrink_from = 4;
  p.ranks.push_back({0, {0, 0}, StateReport{true, 9, "x3:aa"}, std::nullopt});
  p.ranks.push_back({1, {2, 1}, StateReport{}, 0});
  const Plan back = parse_plan_json(plan_json(p));
  CHECK(back.shrink_from == 4u);
  CHECK(back.generation == 5u);
  REQUIRE(back.ranks.size() == 2);
  CHECK(back.ranks[1].worker == WorkerId{2, 1});
  CHECK(back.ranks[1].source_rank == 0);
  ControlState s;
  s.generation = 5;
  s.phase = Phase::Recovering;
  s.plan = plan_json(p);
  CHECK(parse_plan_json(decode_control_state(encode_control_state(s)).plan).shrink_from == 4u);
  // An older coordinator's plan has no shrink_from: afresh.
  nlohmann::json old = plan_json(p);
  old.erase("shrink_from");
  CHECK(parse_plan_json(old).shrink_from == 0u);
  p.shrink_from = 0;
  CHECK(parse_plan_json(plan_json(p)).shrink_from == 0u);
}
