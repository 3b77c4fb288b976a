#include <doctest/doctest.h>

#include <cerrno>
#include <chrono>
#include <map>
#include <vector>

#include "base/error.h"
#include "ddp/fault_injector.h"

using namespace rf;
using elastic::FaultPhase;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;

namespace {

// An injector of rank `rank` whose slowed steps record their delay instead of sleeping.
struct Recorded {
  ddp::FaultInjector inj;
  std::map<int64_t, nanoseconds> delays;  // step -> delay
  std::vector<std::string> fired;         // before_fire's specs
  int64_t current = -1;

  Recorded(const std::string& specs, int rank, int64_t incarnation = 0)
      : inj(elastic::parse_fault_specs(specs), incarnation, rank) {
    inj.set_rank(rank);
    inj.set_sleep([this](nanoseconds d) { delays[current] += d; });
    inj.set_before_fire([this](const elastic::FaultSpec& f, int64_t) { fired.push_back(f.to_string()); });
  }
  // One applied step: every training injection point, then its duration (natural + injected).
  void step(int64_t s, milliseconds natural) {
    current = s;
    const nanoseconds before = delays.count(s) ? delays[s] : nanoseconds(0);
    for (auto p : {FaultPhase::Forward, FaultPhase::Backward, FaultPhase::Allreduce, FaultPhase::Optimizer})
      inj.at(p, s);
    inj.step_took(s, natural + (delays.count(s) ? delays[s] : nanoseconds(0)) - before);
  }
};

}  // namespace

TEST_CASE("slow_delay: (factor - 1) x the median of the recent step times") {
  const auto spec = [](const char* t) { return elastic::parse_fault_spec(t); };
  const std::vector<nanoseconds> odd{milliseconds(30), milliseconds(10), milliseconds(20)};
  const std::vector<nanoseconds> even{milliseconds(40), milliseconds(10), milliseconds(30), milliseconds(20)};
  const nanoseconds fixed = milliseconds(200);
  CHECK(ddp::slow_delay(spec("slow:rank=0:step=1:factor=5"), odd, fixed) == milliseconds(80));
  CHECK(ddp::slow_delay(spec("slow:rank=0:step=1:factor=5"), even, fixed) == milliseconds(100));  // median 25
  CHECK(ddp::slow_delay(spec("slow:rank=0:step=1:factor=1.5"), odd, fixed) == milliseconds(10));
  CHECK(ddp::slow_delay(spec("slow:rank=0:step=1:factor=1"), odd, fixed) == nanoseconds(0));
  // Without factor= (the spec's old meaning), or before any step time is known: the fixed delay.
  CHECK(ddp::slow_delay(spec("slow:rank=0:step=1"), odd, fixed) == fixed);
  CHECK(ddp::slow_delay(spec("slow:rank=0:step=1:factor=5"), {}, fixed) == fixed);
}

TEST_CASE("a slow range delays each of its steps by the rank's own step time, without feedback") {
  Recorded r("slow:rank=1:step=5:factor=5:steps=3", 1);
  for (int64_t s = 0; s < 10; ++s) r.step(s, milliseconds(10));
  // Steps 5, 6, 7 take 5 x 10 ms: the injected 40 ms is not counted in the next median.
  CHECK(r.delays == std::map<int64_t, nanoseconds>{{5, milliseconds(40)}, {6, milliseconds(40)}, {7, milliseconds(40)}});
  // A slowed rank's own work gets shorter (its peers wait for it, it has more of the cores):
  // the reference stays its step time from before the range.
  Recorded busy("slow:rank=1:step=5:factor=5:steps=10", 1);
  for (int64_t s = 0; s < 5; ++s) busy.step(s, milliseconds(10));
  for (int64_t s = 5; s < 15; ++s) busy.step(s, milliseconds(2));
  for (int64_t s = 5; s < 15; ++s) CHECK(busy.delays.at(s) == milliseconds(40));
  // A range from step 0: the fixed delay first, then its own net step time (nothing else is known).
  Recorded early("slow:rank=0:step=0:factor=3:steps=3", 0);
  for (int64_t s = 0; s < 3; ++s) early.step(s, milliseconds(10));
  CHECK(early.delays == std::map<int64_t, nanoseconds>{{0, milliseconds(200)}, {1, milliseconds(20)},
                                                        {2, milliseconds(20)}});
  // The coordinator and the audit log hear of the spec once, at its first delayed step.
  CHECK(r.fired == std::vector<std::string>{"slow:rank=1:step=5:factor=5:steps=3"});
}

TEST_CASE("a slow range follows the rank's step time as it changes") {
  Recorded r("slow:rank=0:step=40:factor=3:steps=1", 0);
  for (int64_t s = 0; s < 8; ++s) r.step(s, milliseconds(10));
  for (int64_t s = 8; s < 40; ++s) r.step(s, milliseconds(30));  // the window holds the last 32
  r.step(40, milliseconds(30));
  CHECK(r.delays.at(40) == milliseconds(60));
}

TEST_CASE("a slow spec delays only its rank, only incarnation 0, and a redone step once") {
  Recorded other("slow:rank=1:step=2:factor=4:steps=5", 0);
  for (int64_t s = 0; s < 10; ++s) other.step(s, milliseconds(10));
  CHECK(other.delays.empty());
  CHECK(other.fired.empty());

  Recorded replacement("slow:rank=1:step=2:factor=4:steps=5", 1, /*incarnation=*/1);
  for (int64_t s = 0; s < 10; ++s) replacement.step(s, milliseconds(10));
  CHECK(replacement.delays.empty());

  Recorded r("slow:rank=1:step=1:factor=3:steps=2", 1);
  r.step(0, milliseconds(10));
  r.current = 1;
  r.inj.at(FaultPhase::Forward, 1);  // delayed, then step 1 fails: a recovery redoes it
  CHECK(r.delays.at(1) == milliseconds(20));
  r.inj.on_plan(1, false);
  r.step(1, milliseconds(30));  // not delayed again, so its 30 ms are an ordinary step's:
  CHECK(r.delays.at(1) == milliseconds(20));  // the failed attempt's delay is forgotten
  r.step(2, milliseconds(10));
  CHECK(r.delays.at(2) == milliseconds(40));  // 2 x the median of 10 and 30 ms
}

TEST_CASE("slow without factor= keeps its old meaning: one fixed delay at its step") {
  Recorded r("slow:rank=0:step=4", 0);
  r.inj.set_slow_ms(200);
  for (int64_t s = 0; s < 8; ++s) r.step(s, milliseconds(10));
  CHECK(r.delays == std::map<int64_t, nanoseconds>{{4, milliseconds(200)}});
  Recorded few("slow:rank=0:step=4:steps=2", 0);  // steps= alone: the fixed delay at each
  for (int64_t s = 0; s < 8; ++s) few.step(s, milliseconds(10));
  CHECK(few.delays == std::map<int64_t, nanoseconds>{{4, milliseconds(200)}, {5, milliseconds(200)}});
}

TEST_CASE("phase=leave: after the last step, before the leave, once even when the worker leaves again") {
  Recorded r("slow:rank=1:step=7:phase=leave:factor=11;kill:rank=0:step=7:phase=leave", 1);
  for (int64_t s = 0; s < 8; ++s) r.step(s, milliseconds(10));
  CHECK(r.delays.empty());  // no training phase matches phase=leave
  r.inj.at(FaultPhase::Leave, 6);
  CHECK(r.delays.empty());  // only at its step
  r.inj.at(FaultPhase::Leave, 7);
  CHECK(r.delays == std::map<int64_t, nanoseconds>{{7, milliseconds(100)}});
  r.inj.at(FaultPhase::Leave, 7);  // fenced before the leave's answer: it leaves again, undelayed
  CHECK(r.delays == std::map<int64_t, nanoseconds>{{7, milliseconds(100)}});
  CHECK(r.fired == std::vector<std::string>{"slow:rank=1:step=7:phase=leave:factor=11"});  // rank 0's kill is not its
}

TEST_CASE("slow in the all-reduce after K chunks: once per step, from the chunk hook") {
  Recorded r("slow:rank=0:step=2:phase=allreduce:after_chunks=2:factor=3:steps=2", 0);
  for (int64_t s = 0; s < 2; ++s) r.step(s, milliseconds(10));
  r.current = 2;
  r.inj.at(FaultPhase::Allreduce, 2);  // the training thread's point is not this spec's
  r.inj.on_chunk(2, 1);
  CHECK(r.delays.empty());
  r.inj.on_chunk(2, 2);
  r.inj.on_chunk(2, 3);
  CHECK(r.delays == std::map<int64_t, nanoseconds>{{2, milliseconds(20)}});
  r.inj.step_took(2, milliseconds(30));
  r.current = 3;
  r.inj.on_chunk(3, 2);
  r.inj.step_took(3, milliseconds(30));
  r.current = 4;
  r.inj.on_chunk(4, 2);  // beyond steps=2
  CHECK(r.delays == std::map<int64_t, nanoseconds>{{2, milliseconds(20)}, {3, milliseconds(20)}});
}

TEST_CASE("disk: the first writes= checkpoints from its step, of rank 0, incarnation 0; no training phase fires it") {
  Recorded r("disk:rank=0:step=10:error=ENOSPC:writes=2;disk:rank=0:step=30:delay=1.5", 0);
  for (int64_t s = 0; s < 12; ++s) r.step(s, milliseconds(10));
  CHECK(r.fired.empty());                         // a disk fault strikes writes, not steps
  CHECK_FALSE(r.inj.storage_fault(9).any());      // before its step
  CHECK(r.inj.storage_fault(19).err == ENOSPC);   // the first checkpoint at or after it
  CHECK(r.fired == std::vector<std::string>{"disk:rank=0:step=10:error=ENOSPC:writes=2"});
  CHECK(r.inj.storage_fault(29).err == ENOSPC);   // writes=2
  const ckpt::StorageFault slow = r.inj.storage_fault(39);  // the first spec is spent; a slow disk
  CHECK(slow.err == 0);
  CHECK(slow.delay == milliseconds(1500));
  CHECK_FALSE(r.inj.storage_fault(49).any());
  CHECK(r.fired.size() == 2);

  Recorded rank1("disk:rank=0:step=0:error=EIO", 1);  // not the writer
  CHECK_FALSE(rank1.inj.storage_fault(5).any());
  Recorded restarted("disk:rank=0:step=0:error=EIO", 0, 1);  // a replacement never repeats it
  CHECK_FALSE(restarted.inj.storage_fault(5).any());
}

TEST_CASE("gpu_hang: the process's action runs once, at its step and rank, and the thread goes on") {
  int hangs = 0;
  ddp::set_gpu_hang_action([&] { ++hangs; });
  Recorded r("gpu_hang:rank=1:step=4;gpu_hang:rank=0:step=2", 1);
  for (int64_t s = 0; s < 8; ++s) r.step(s, milliseconds(10));  // returns: the host thread is not held
  CHECK(hangs == 1);
  CHECK(r.fired == std::vector<std::string>{"gpu_hang:rank=1:step=4"});
  // A step redone after the recovery it caused does not fire it again; nor does a replacement.
  r.inj.on_plan(4, false);
  r.step(4, milliseconds(10));
  CHECK(hangs == 1);
  Recorded restarted("gpu_hang:rank=1:step=4", 1, 1);
  for (int64_t s = 0; s < 8; ++s) restarted.step(s, milliseconds(10));
  CHECK(hangs == 1);
  // At a phase of its own.
  Recorded backward("gpu_hang:rank=0:step=1:phase=backward", 0);
  backward.inj.at(FaultPhase::Forward, 1);
  CHECK(hangs == 1);
  backward.inj.at(FaultPhase::Backward, 1);
  CHECK(hangs == 2);

  // Without an action (a CPU worker, which refuses the spec before it starts): an error, not a no-op.
  ddp::set_gpu_hang_action({});
  Recorded cpu("gpu_hang:rank=0:step=0", 0);
  std::string why;
  try {
    cpu.inj.at(FaultPhase::Forward, 0);
  } catch (const InvalidInput& e) {
    why = e.what();
  }
  CHECK(why.find("--inject gpu_hang:rank=0:step=0: this process has no GPU stream to make stuck") == 0);
}
