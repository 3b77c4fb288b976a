// What the trainer tells make_communicator besides the generation: the model's device
// (place_comm) and the plan's members in rank order (plan_members, CommOptions::members),
// the identities NCCL's shrink compares between generations.
#include <doctest/doctest.h>

#include "ddp/comm_options.h"
#include "tests/comm/null_communicator.h"

using namespace rf;
using namespace rf::ddp;

TEST_CASE("the communicator's device is the model's") {
  comm::CommOptions co;
  place_comm(co, Device::CPU);
  CHECK(co.device == comm::Device::host);
  CHECK(co.device_index == 0);
  place_comm(co, Device::cuda(3));
  CHECK(co.device == comm::Device::cuda);
  CHECK(co.device_index == 3);
  place_comm(co, Device::CPU);  // back to the host, index cleared
  CHECK(co.device == comm::Device::host);
  CHECK(co.device_index == 0);
}

TEST_CASE("the plan's members in rank order, slot and incarnation") {
  elastic::Plan plan;
  // The plan lists ranks in any order: rank decides the position.
  plan.ranks.push_back({.rank = 2, .worker = {.slot = 0, .incarnation = 1}, .report = {}, .source_rank = 0});
  plan.ranks.push_back({.rank = 0, .worker = {.slot = 3, .incarnation = 0}, .report = {}, .source_rank = {}});
  plan.ranks.push_back({.rank = 1, .worker = {.slot = 1, .incarnation = 2}, .report = {}, .source_rank = {}});
  CHECK(plan_members(plan) == std::vector<std::string>{"slot3.inc0", "slot1.inc2", "slot0.inc1"});
  CHECK(plan_members(elastic::Plan{}).empty());
}

TEST_CASE("the regroup is the plan's: shrink_from g shrinks generation g's, 0 forms afresh") {
  elastic::Plan plan;
  plan.generation = 6;
  CHECK(plan_regroup(plan).kind == comm::CommRegroup::Kind::fresh);
  plan.shrink_from = 5;
  const comm::CommRegroup r = plan_regroup(plan);
  CHECK(r.kind == comm::CommRegroup::Kind::shrink);
  CHECK(r.from_generation == 5u);
}

namespace {
// A communicator of generation `g` that can (or cannot) be regrouped from; nothing else works.
class KeptComm : public comm::testing::NullCommunicator {
 public:
  KeptComm(uint64_t g, bool regroup) : g_(g), regroup_(regroup) {}
  uint64_t generation() const override { return g_; }
  bool can_regroup() const override { return regroup_; }

 private:
  uint64_t g_;
  bool regroup_;
};
}  // namespace

TEST_CASE("the report's comm_generation: the kept communicator's generation when it can regroup, else 0") {
  CHECK(regroup_generation(nullptr) == 0u);  // none kept (UCX, or the first round)
  const KeptComm revoked(4, true), aborted(4, false);
  CHECK(regroup_generation(&revoked) == 4u);
  CHECK(regroup_generation(&aborted) == 0u);
}
