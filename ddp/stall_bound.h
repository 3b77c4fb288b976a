#pragma once
// StallBound — how long a worker may go without progress before it is taken as stuck
// (docs/protocol.md D3), learned from its own recent step times instead of one fixed timeout.
// Pure: observe() durations, read bounds; unit-tested without a clock.
//
// In training, the bound is `step_factor` x the median of the last `window` step times,
// never below `floor` nor above `ceiling` (TrainerConfig::stall). A step 10x slower
// than usual (a slow rank, a CPU hog, a checkpoint's copy) stays below it; a hung thread
// crosses it within about a second. Until `warmup` steps were seen (a fresh process: its
// first steps fault pages in and fill caches) the bound is the ceiling.
// In recovery (connect, transfer, verify), where the work is the state's size rather than a
// step's, the bound is floor + state bytes / transfer_bytes_per_s, within the same limits.
//
// Two detectors use a bound: the coordinator judges the training thread from the worker's
// heartbeats (elastic/liveness.h: computing past one bound is hung, waiting inside one
// collective past wedge_factor bounds is wedged), and the communicator's own stall timeout
// is comm_stall(bound) = 1.5 bounds, so a healthy peer waiting on the hung rank is aborted
// by the hung rank's eviction before its own D3 blames its neighbour, while a communicator
// that is itself stuck still fails by D3 before the coordinator calls it wedged.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/clock.h"

namespace rf::ddp {

struct StallBoundOptions {
  Duration floor = std::chrono::seconds(1);
  Duration ceiling = std::chrono::seconds(30);
  double step_factor = 20.0;
  size_t window = 64;
  size_t warmup = 3;
  double transfer_bytes_per_s = 100e6;
};

class StallBound {
 public:
  explicit StallBound(StallBoundOptions options = {});
  void observe(Duration step_time);
  Duration median_step() const;  // zero before the first observation
  Duration step_bound() const;
  Duration recovery_bound(uint64_t state_bytes) const;
  static Duration comm_stall(Duration bound) { return bound + bound / 2; }

 private:
  Duration clamp(Duration d) const;
  StallBoundOptions opt_;
  std::vector<Duration> ring_;  // the last `window` step times (circular)
  size_t next_ = 0;
  size_t count_ = 0;
  mutable std::vector<Duration> scratch_;  // for the median, reused
};

}  // namespace rf::ddp
