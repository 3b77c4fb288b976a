#include <doctest/doctest.h>

#include "base/error.h"
#include "elastic/fault_spec.h"

using namespace rf::elastic;

TEST_CASE("fault specs parse and round-trip") {
  auto f = parse_fault_spec("kill:rank=2:step=150:phase=allreduce:after_chunks=3");
  CHECK(f.kind == FaultKind::Kill);
  CHECK(f.rank == 2);
  CHECK(f.step == 150);
  CHECK(f.phase == FaultPhase::Allreduce);
  CHECK(f.after_chunks == 3);
  CHECK_FALSE(f.launcher_side());
  CHECK(parse_fault_spec(f.to_string()) == f);
  auto g = parse_fault_spec("stop:rank=0:at=1.5");
  CHECK(g.launcher_side());
  CHECK(g.at_seconds == doctest::Approx(1.5));
  auto list = parse_fault_specs("hang:rank=1:step=3;slow:rank=0:step=1:phase=forward");
  REQUIRE(list.size() == 2);
  CHECK(parse_fault_specs(join_fault_specs(list)) == list);
  CHECK(parse_fault_specs("").empty());
}

TEST_CASE("malformed fault specs are refused with the reason") {
  auto reason = [](const std::string& s) {
    try {
      parse_fault_spec(s);
    } catch (const rf::InvalidInput& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(reason("explode:rank=1:step=2").find("unknown kind 'explode'") != std::string::npos);
  CHECK(reason("kill:step=2").find("rank= is required") != std::string::npos);
  CHECK(reason("kill:rank=1").find("one of step= or at=") != std::string::npos);
  CHECK(reason("kill:rank=1:step=2:at=3").find("not both") != std::string::npos);
  CHECK(reason("kill:rank=x:step=2").find("not an integer") != std::string::npos);
  CHECK(reason("kill:rank=1:step=-2").find(">= 0") != std::string::npos);
  CHECK(reason("kill:rank=1:step=2:phase=lunch").find("unknown phase") != std::string::npos);
  CHECK(reason("kill:rank=1:at=2:phase=forward").find("only go with step") != std::string::npos);
  CHECK(reason("hang:rank=1:at=2").find("kill or stop") != std::string::npos);
  CHECK(reason("kill:rank=1:rank=2:step=1").find("twice") != std::string::npos);
  CHECK(reason("kill:rank=1:step=1:color=red").find("unknown key") != std::string::npos);
  CHECK(reason("kill:rank=1:at=nan").find("not a time") != std::string::npos);
  CHECK_THROWS_AS(parse_fault_specs("kill:rank=1:step=1;;"), rf::InvalidInput);
}
