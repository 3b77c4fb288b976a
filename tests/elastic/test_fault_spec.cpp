#include <doctest/doctest.h>

#include <cerrno>
#include <string>

#include "base/error.h"
#include "elastic/fault_spec.h"

using namespace rf::elastic;

namespace {
// Why parse_fault_spec refuses `spec` (rf::InvalidInput's text), or "" when it accepts it.
std::string reason(const std::string& spec) {
  try {
    parse_fault_spec(spec);
  } catch (const rf::InvalidInput& e) {
    return e.what();
  }
  return "";
}
}  // namespace

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
  auto l = parse_fault_spec("slow:rank=3:step=119:phase=leave:factor=200");
  CHECK(l.phase == FaultPhase::Leave);
  CHECK(l.to_string() == "slow:rank=3:step=119:phase=leave:factor=200");
  CHECK(parse_fault_spec(l.to_string()) == l);
}

TEST_CASE("a stop with for= is a freeze of that many seconds, then the process goes on") {
  auto f = parse_fault_spec("stop:rank=2:step=12:phase=forward:for=2.5");
  CHECK(f.kind == FaultKind::Stop);
  CHECK(f.for_s == 2.5);
  CHECK(f.to_string() == "stop:rank=2:step=12:phase=forward:for=2.5");
  CHECK(parse_fault_spec(f.to_string()) == f);
  CHECK_FALSE(parse_fault_spec("stop:rank=2:step=12").for_s);  // without for=: stopped for good
  CHECK(reason("kill:rank=1:step=2:for=1").find("for= only goes with kind stop and step=") != std::string::npos);
  CHECK(reason("stop:rank=1:at=2:for=1").find("for= only goes with kind stop and step=") != std::string::npos);
  CHECK(reason("stop:rank=1:step=2:for=0").find("from 0.001 to 3600") != std::string::npos);
  CHECK(reason("stop:rank=1:step=2:for=x").find("from 0.001 to 3600") != std::string::npos);
}

TEST_CASE("a slow rank says how slow and for how many steps") {
  auto f = parse_fault_spec("slow:rank=1:step=100:factor=5:steps=200");
  CHECK(f.kind == FaultKind::Slow);
  CHECK(f.step == 100);
  CHECK(f.factor == 5.0);
  CHECK(f.steps == 200);
  CHECK(f.to_string() == "slow:rank=1:step=100:factor=5:steps=200");
  CHECK(parse_fault_spec(f.to_string()) == f);
  // Without factor= and steps= a slow spec means what it always did: one fixed delay.
  auto once = parse_fault_spec("slow:rank=0:step=3:phase=allreduce:after_chunks=1");
  CHECK_FALSE(once.factor.has_value());
  CHECK_FALSE(once.steps.has_value());
  CHECK(once.to_string() == "slow:rank=0:step=3:phase=allreduce:after_chunks=1");
  // Every double reads back as itself (not rounded to 6 significant digits).
  for (const char* text : {"slow:rank=2:step=7:factor=1.2345678901234567", "slow:rank=2:step=7:factor=1",
                           "slow:rank=0:step=0:phase=backward:factor=10:steps=1"}) {
    auto g = parse_fault_spec(text);
    CHECK(parse_fault_spec(g.to_string()) == g);
  }
  auto late = parse_fault_spec("kill:rank=0:at=0.30000000000000004");
  CHECK(parse_fault_spec(late.to_string()) == late);
  auto list = parse_fault_specs("slow:rank=1:step=10:factor=5:steps=20;slow:rank=1:step=40:factor=10");
  REQUIRE(list.size() == 2);
  CHECK(parse_fault_specs(join_fault_specs(list)) == list);
}

TEST_CASE("malformed fault specs are refused with the reason") {
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
  // slow's factor= and steps=: the spec is named, and what is wrong with it.
  const std::string r1 = reason("slow:rank=1:step=2:factor=0.5");
  CHECK(r1.find("fault spec 'slow:rank=1:step=2:factor=0.5'") != std::string::npos);
  CHECK(r1.find("factor='0.5' is not a number from 1 to 1000") != std::string::npos);
  CHECK(reason("slow:rank=1:step=2:factor=fast").find("factor='fast' is not a number") != std::string::npos);
  CHECK(reason("slow:rank=1:step=2:factor=inf").find("factor='inf' is not a number") != std::string::npos);
  CHECK(reason("slow:rank=1:step=2:factor=").find("factor='' is not a number") != std::string::npos);
  CHECK(reason("slow:rank=1:step=2:steps=0").find("steps=0 must be >= 1") != std::string::npos);
  CHECK(reason("slow:rank=1:step=2:steps=2.5").find("steps='2.5' is not an integer") != std::string::npos);
  CHECK(reason("slow:rank=1:step=2:steps=99999999999").find("steps= is too large") != std::string::npos);
  CHECK(reason("kill:rank=1:step=2:factor=5").find("only go with kind slow, not kill") != std::string::npos);
  CHECK(reason("hang:rank=1:step=2:steps=5").find("only go with kind slow, not hang") != std::string::npos);
  CHECK(reason("slow:rank=1:step=2:factor=2:factor=3").find("twice") != std::string::npos);
}

TEST_CASE("a disk fault names its errno, delay and number of checkpoint writes; only rank 0 writes") {
  auto f = parse_fault_spec("disk:rank=0:step=199:error=ENOSPC");
  CHECK(f.kind == FaultKind::Disk);
  CHECK(f.error == ENOSPC);
  CHECK_FALSE(f.delay_s.has_value());
  CHECK(f.to_string() == "disk:rank=0:step=199:error=ENOSPC");
  for (const char* text : {"disk:rank=0:step=0:error=EIO:writes=3", "disk:rank=0:step=5:error=EROFS",
                           "disk:rank=0:step=5:error=EDQUOT:delay=0.5", "disk:rank=0:step=9:delay=2:writes=2"}) {
    CAPTURE(text);
    auto g = parse_fault_spec(text);
    CHECK(g.to_string() == text);
    CHECK(parse_fault_spec(g.to_string()) == g);
  }
  CHECK(reason("disk:rank=0:step=5:error=EPERM").find("not one of ENOSPC, EIO, EROFS, EDQUOT") != std::string::npos);
  CHECK(reason("disk:rank=0:step=5").find("needs error= or delay=") != std::string::npos);
  CHECK(reason("disk:rank=1:step=5:error=EIO").find("rank 0") != std::string::npos);
  CHECK(reason("disk:rank=0:step=5:error=EIO:phase=forward").find("checkpoint writer") != std::string::npos);
  CHECK(reason("disk:rank=0:at=5").find("kill or stop") != std::string::npos);
  CHECK(reason("kill:rank=0:step=5:error=EIO").find("only go with kind disk") != std::string::npos);
  CHECK(reason("disk:rank=0:step=5:delay=-1").find("not a time in seconds") != std::string::npos);
  CHECK(reason("disk:rank=0:step=5:error=EIO:writes=0").find(">= 1") != std::string::npos);
}

TEST_CASE("gpu_hang: a worker's GPU stuck at a step (and phase); refused on a CPU worker") {
  auto f = parse_fault_spec("gpu_hang:rank=1:step=20");
  CHECK(f.kind == FaultKind::GpuHang);
  CHECK(f.rank == 1);
  CHECK(f.step == 20);
  CHECK(f.to_string() == "gpu_hang:rank=1:step=20");
  CHECK(parse_fault_spec(f.to_string()) == f);
  auto g = parse_fault_spec("gpu_hang:rank=0:step=5:phase=backward");
  CHECK(g.phase == FaultPhase::Backward);
  CHECK(parse_fault_spec(g.to_string()) == g);
  CHECK(needs_gpu(FaultKind::GpuHang));
  CHECK_FALSE(needs_gpu(FaultKind::Hang));
  // The launcher cannot make a worker's GPU stuck; the kernel goes in at a phase's start.
  CHECK(reason("gpu_hang:rank=1:at=2").find("kill or stop") != std::string::npos);
  CHECK(reason("gpu_hang:rank=1:step=2:phase=allreduce:after_chunks=1").find("no after_chunks=") != std::string::npos);
  CHECK(reason("gpu_hang:rank=1:step=2:factor=5").find("only go with kind slow, not gpu_hang") != std::string::npos);
  CHECK(reason("gpu_hang:step=2").find("rank= is required") != std::string::npos);
  CHECK(reason("gpu_stuck:rank=1:step=2").find("gpu_hang") != std::string::npos);  // the kinds are listed

  // A worker on the CPU refuses it before it starts, naming the spec; other kinds pass.
  CHECK_NOTHROW(refuse_gpu_faults_on_cpu(parse_fault_specs("kill:rank=1:step=3;hang:rank=0:step=4")));
  CHECK_NOTHROW(refuse_gpu_faults_on_cpu({}));
  std::string why;
  try {
    refuse_gpu_faults_on_cpu(parse_fault_specs("kill:rank=1:step=3;gpu_hang:rank=2:step=9"));
  } catch (const rf::InvalidInput& e) {
    why = e.what();
  }
  CHECK(why ==
        "fault spec 'gpu_hang:rank=2:step=9': gpu_hang makes a worker's GPU stuck, and this worker computes on the CPU: "
        "it means nothing there (train with --device cuda)");
}
