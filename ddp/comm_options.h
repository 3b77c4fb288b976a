#pragma once
// The communicator options a generation's plan implies (recovery's step 5), as functions of
// the plan: pure, tested in tests/ddp/test_comm_options.cpp.
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/device.h"
#include "elastic/client.h"

namespace rf::ddp {

// The communicator on the model's device: comm::Device::cuda and its index for a GPU,
// host memory on the CPU.
void place_comm(comm::CommOptions& options, Device device);

// Each plan member's identity in rank order, "slot<S>.inc<I>" (CommOptions::members): a
// restarted worker is a new member.
std::vector<std::string> plan_members(const elastic::Plan& plan);

// How the plan's generation forms its communicator (CommOptions::regroup), as the plan
// says for every rank: shrink_from g -> shrink generation g's, 0 -> afresh.
comm::CommRegroup plan_regroup(const elastic::Plan& plan);
// What a worker reports as StateReport::comm_generation: the generation of the communicator
// it kept (drop_comm) when that one can be regrouped from, else 0.
uint64_t regroup_generation(const comm::Communicator* previous);

}  // namespace rf::ddp
