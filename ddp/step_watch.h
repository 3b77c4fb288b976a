#pragma once
// StepWatch — the worker's half of hang detection (docs/protocol.md D3): which stall bound
// applies to what the training thread does now, published on the ActivityBoard for the
// heartbeats (the coordinator judges it, elastic/liveness.h), and the communicator stall
// timeout that bound implies (StallBound::comm_stall: 1.5 bounds).
//
//   in a step        the bound learned from this worker's step times (step_bound)
//   in a recovery    floor + the state's size at transfer speed (recovery_bound), the same
//                    bound for every phase of that recovery
//   connecting       idle: connect has its own deadline and ends at a revocation
//   without a coordinator (fault tolerance off): the fixed ceiling, nobody judges
#include <chrono>
#include <cstdint>

#include "base/clock.h"
#include "ddp/activity.h"
#include "ddp/stall_bound.h"

namespace rf::ddp {

class StepWatch {
 public:
  explicit StepWatch(StallBoundOptions options) : options_(options), stall_(options) {}

  // Step `step` begins. Returns the communicator stall timeout for it.
  Duration begin_step(int64_t step);
  // Step applied: its time teaches the step bound.
  void end_step(Duration step_time) { stall_.observe(step_time); }
  // The recovery to `generation` begins (state_bytes: the state image's size). Returns the
  // communicator stall timeout for the new generation, in whole milliseconds (>= 1 ms).
  std::chrono::milliseconds begin_recovery(uint64_t generation, uint64_t state_bytes);
  // Computing again in the recovery begun last (after connecting), with its bound.
  void continue_recovery();
  // Waiting on the coordinator, or connecting: not judged.
  void idle() { board_.idle(); }
  // The communicator stall timeout without a coordinator: the fixed ceiling.
  std::chrono::milliseconds fixed_comm_stall() const { return whole_ms(options_.ceiling); }

  ActivityBoard& board() { return board_; }
  static std::chrono::milliseconds whole_ms(Duration d);

 private:
  StallBoundOptions options_;
  StallBound stall_;
  ActivityBoard board_;
  uint64_t recovery_generation_ = 0;
  Duration recovery_bound_{};
};

}  // namespace rf::ddp
