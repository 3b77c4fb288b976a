#pragma once
// When rank 0 takes a disk checkpoint after a step: a pure function, so the policy is
// tested without a disk. A periodic checkpoint never makes training wait for the disk:
// when the previous one is still being written it is deferred to the first step the
// writer is free (the copy itself is one memcpy of S, well inside the stall bound; a wait
// for a slow disk would not be, and the peers waiting in the next all-reduce would see the
// rank as stuck). A forced one (the control block's checkpoint-now, a graceful stop, the
// end of training) waits: every rank stops there anyway.
#include <cstdint>

namespace rf::ddp {

enum class CheckpointAction { None, Save, Defer };

// What the policy decides on (named at the call: designated initializers).
struct CheckpointView {
  int64_t step = -1;         // the step just applied
  int64_t every = 0;         // ckpt_every (0 = none periodic)
  bool forced = false;       // checkpoint-now, a graceful stop or the end (see above)
  bool deferred = false;     // a periodic checkpoint is waiting for the writer
  bool writer_busy = false;  // a write runs
};

inline CheckpointAction checkpoint_action(const CheckpointView& v) {
  if (v.forced) return CheckpointAction::Save;
  const bool due = v.deferred || (v.every > 0 && (v.step + 1) % v.every == 0);
  if (!due) return CheckpointAction::None;
  return v.writer_busy ? CheckpointAction::Defer : CheckpointAction::Save;
}

}  // namespace rf::ddp
