// Recovery's steps one by one against the coordinator in memory (elastic/sim_control.h) and the
// loopback data plane: what each step does to the communicator, the coordinator and the
// worker's next event, as Membership's unit cases check the coordinator's side.
#include <doctest/doctest.h>

#include <memory>
#include <thread>
#include <vector>

#include "comm/errors.h"
#include "core/optim/sgd.h"
#include "ddp/recovery.h"
#include "elastic/sim_control.h"
#include "test_model.h"
#include "tests/comm/inproc/loopback_communicator.h"

using namespace rf;
using namespace rf::ddp;

namespace {

// One worker's recovery and everything it works on, as the trainer holds them.
struct SimWorker {
  std::shared_ptr<nn::Sequential> model = ddp::testing::make_test_mlp(7, 16);
  optim::SGD sgd{model->named_parameters(), optim::SgdOptions{}};
  TrainState state{*model, sgd, "mlp"};
  TrainerConfig cfg;
  CurrentGeneration current;
  Reducer reducer{model->named_parameters()};
  StepWatch watch{cfg.stall};
  Checkpointing checkpointing{CheckpointingOptions{}, *model, sgd, state};
  FaultInjector inj;
  AuditLog audit;
  std::shared_ptr<elastic::SimControl> control;
  Recovery recovery{{cfg, current, state, reducer, watch, checkpointing}};

  SimWorker(elastic::SimCoordinator& c, comm::inproc::LoopbackNetwork& net, int slot) {
    cfg.seams.communicators = net.factory();
    control = c.worker(slot, 0);
    recovery.start(control, "", inj, audit);
  }
  // join, report, form and ready: the first generation, as every worker's life begins.
  void start() {
    REQUIRE(recovery.join());
    REQUIRE(recovery.report().kind == WorkerEventKind::PlanReceived);
    REQUIRE(recovery.form().kind == WorkerEventKind::Formed);
    REQUIRE(recovery.resume().kind == WorkerEventKind::Running);
  }
};

elastic::MembershipOptions two() {
  elastic::MembershipOptions o;
  o.target_world = 2;
  return o;
}

// Both workers through their first generation, each on a thread of its own.
void start_both(SimWorker& a, SimWorker& b) {
  std::thread t([&] { a.start(); });
  b.start();
  t.join();
}

bool logged(const elastic::SimCoordinator& c, elastic::TransitionEvent e, int slot, const std::string& cause) {
  for (const auto& t : c.transitions())
    if (t.event == e && t.worker.slot == slot && t.cause == cause) return true;
  return false;
}

}  // namespace

TEST_CASE("recovery: two fresh workers plan generation 1 as a fresh start, connect through the store, verify, run") {
  elastic::SimCoordinator coord(two());
  comm::inproc::LoopbackNetwork net;
  SimWorker a(coord, net, 0), b(coord, net, 1);
  start_both(a, b);
  CHECK(a.current.plan.generation == 1);
  CHECK(a.current.plan.fresh_start);
  CHECK(a.current.rank != b.current.rank);
  CHECK(a.current.world == 2);
  CHECK(a.current.comm != nullptr);
  CHECK(coord.phase() == elastic::Phase::Running);
  CHECK_FALSE(a.recovery.generation_over());
}

TEST_CASE("recovery step 1: a revocation aborts the generation's communicator at once, and the generation is over") {
  elastic::SimCoordinator coord(two());
  comm::inproc::LoopbackNetwork net;
  SimWorker a(coord, net, 0), b(coord, net, 1);
  start_both(a, b);
  coord.kill({1, 0});  // b's process is gone (D1): g is revoked, a hears it with the replies
  CHECK(a.current.comm->aborted());
  CHECK(a.recovery.generation_over());
  CHECK(coord.generation() == 2);
}

TEST_CASE("recovery: failure() names the failed peer's slot to the coordinator, which revokes for it") {
  elastic::SimCoordinator coord(two());
  comm::inproc::LoopbackNetwork net;
  SimWorker a(coord, net, 0), b(coord, net, 1);
  start_both(a, b);
  comm::CommErrorInfo info;
  info.rank = a.current.rank;
  info.collective = "all-reduce";
  info.peer = b.current.rank;
  info.cause = "connection reset";
  a.recovery.failure(comm::PeerFailed(info));
  CHECK(logged(coord, elastic::TransitionEvent::Revoke, 1, "failure_report"));
  CHECK(a.recovery.generation_over());
  CHECK(b.current.comm->aborted());  // b heard the revocation too
}

TEST_CASE("recovery: an evicted worker self-fences (D4): its communicator fails as its own, and report() says Fenced") {
  elastic::SimCoordinator coord(two());
  comm::inproc::LoopbackNetwork net;
  SimWorker a(coord, net, 0), b(coord, net, 1);
  start_both(a, b);
  coord.pause({0, 0}, true);  // a sends no heartbeats: its lease runs out (D2)
  for (int i = 0; i < 12; ++i) coord.advance(std::chrono::milliseconds(100));
  CHECK(logged(coord, elastic::TransitionEvent::Evict, 0, "lease_expired"));
  CHECK_FALSE(a.control->fenced());  // it has not heard yet
  coord.pause({0, 0}, false);
  coord.advance(std::chrono::milliseconds(100));  // its next heartbeat's reply: evicted
  CHECK(a.control->fenced());
  CHECK(a.current.comm->aborted());
  CHECK(a.recovery.report().kind == WorkerEventKind::Fenced);
}
