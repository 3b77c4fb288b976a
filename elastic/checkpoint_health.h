#pragma once
// The job's disk checkpoints that could not be written, as the coordinator learns them from
// heartbeats: a writer (rank 0) counts its own failures and sends the count and
// the last error with every heartbeat; the job's total is the sum of the last count of
// every worker process that ever sent one (rank 0 may change, and a replacement counts
// from zero). A count that grew is news: the coordinator logs a `checkpoint_failed` event
// and the launcher's live line and summary show the total and the last error. Pure.
#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "elastic/plan.h"

namespace rf::elastic {

class CheckpointHealth {
 public:
  // Worker w says it has failed `failed` checkpoints so far, the last with `error`. True
  // when its count grew (older, reordered or repeated heartbeats are no news).
  bool observe(WorkerId w, int64_t failed, const std::string& error);
  int64_t total() const { return total_; }
  const std::string& last_error() const { return last_error_; }

 private:
  std::map<std::pair<int, int64_t>, int64_t> counts_;  // (slot, incarnation) -> its count
  int64_t total_ = 0;
  std::string last_error_;
};

}  // namespace rf::elastic
