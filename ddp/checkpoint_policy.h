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

// step: the step just applied; every: ckpt_every (0 = none periodic); forced: see above;
// deferred: a periodic checkpoint is waiting for the writer; writer_busy: a write runs.
inline CheckpointAction checkpoint_action(int64_t step, int64_t every, bool forced, bool deferred, bool writer_busy) {
  if (forced) return CheckpointAction::Save;
  const bool due = deferred || (every > 0 && (step + 1) % every == 0);
  if (!due) return CheckpointAction::None;
  return writer_busy ? CheckpointAction::Defer : CheckpointAction::Save;
}

}  // namespace rf::ddp
