#include "ddp/step_watch.h"

#include <algorithm>

namespace rf::ddp {

std::chrono::milliseconds StepWatch::whole_ms(Duration d) {
  return std::max(std::chrono::milliseconds(1), std::chrono::ceil<std::chrono::milliseconds>(d));
}

Duration StepWatch::begin_step(int64_t step) {
  const Duration bound = stall_.step_bound();
  board_.compute(ActivityBoard::Region::Step, step, bound);
  return StallBound::comm_stall(bound);
}

std::chrono::milliseconds StepWatch::begin_recovery(uint64_t generation, uint64_t state_bytes) {
  recovery_generation_ = generation;
  recovery_bound_ = stall_.recovery_bound(state_bytes);  // its work is the state's size
  continue_recovery();
  return whole_ms(StallBound::comm_stall(recovery_bound_));
}

void StepWatch::continue_recovery() {
  board_.compute(ActivityBoard::Region::Recovery, static_cast<int64_t>(recovery_generation_), recovery_bound_);
}

}  // namespace rf::ddp
