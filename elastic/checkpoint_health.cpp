#include "elastic/checkpoint_health.h"

namespace rf::elastic {

bool CheckpointHealth::observe(WorkerId w, int64_t failed, const std::string& error) {
  int64_t& seen = counts_[{w.slot, w.incarnation}];
  if (failed <= seen) return false;
  total_ += failed - seen;
  seen = failed;
  last_error_ = error;
  return true;
}

}  // namespace rf::elastic
