// What the trainer tells make_communicator besides the generation: the model's device
// (place_comm) and the plan's members in rank order (plan_members, CommOptions::members),
// the identities NCCL's shrink compares between generations.
#include <doctest/doctest.h>

#include "ddp/recovery.h"

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
