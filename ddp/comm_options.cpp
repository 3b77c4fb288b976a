#include "ddp/comm_options.h"

#include "base/enforce.h"
#include "base/str.h"

namespace rf::ddp {

void place_comm(comm::CommOptions& options, Device device) {
  options.device = device.is_cpu() ? comm::Device::host : comm::Device::cuda;
  options.device_index = device.is_cpu() ? 0 : device.index;
}

std::vector<std::string> plan_members(const elastic::Plan& plan) {
  std::vector<std::string> members(plan.ranks.size());
  for (const elastic::PlanRank& pr : plan.ranks) {
    RF_ENFORCE(pr.rank >= 0 && pr.rank < plan.world(), "plan rank outside the world");
    members[static_cast<size_t>(pr.rank)] = str("slot", pr.worker.slot, ".inc", pr.worker.incarnation);
  }
  return members;
}

comm::CommRegroup plan_regroup(const elastic::Plan& plan) {
  if (plan.shrink_from == 0) return {};
  return {comm::CommRegroup::Kind::shrink, plan.shrink_from};
}

uint64_t regroup_generation(const comm::Communicator* previous) {
  return previous && previous->can_regroup() ? previous->generation() : 0;
}

}  // namespace rf::ddp
