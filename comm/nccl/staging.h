#pragma once
// Host buffers on the NCCL backend: NCCL moves device memory only, so a collective on a
// host buffer (the recovery's digest all-gather, the barrier, the state transfer's byte
// blobs) goes through a staging slot: pinned host memory and device scratch of the same
// size, copied on the communicator's stream before and after the NCCL call.
//
// Page faults and cudaMalloc/cudaMallocHost (which synchronize the device) are expensive,
// so slots are allocated once and reused: a process-wide pool per GPU hands out a slot at
// least as large as asked (grown by doubling), and takes it back when its operation's done
// event has completed. After the first step nothing is allocated. A slot whose operation
// was revoked while its copies could still run (a stuck kernel ahead of them on the
// stream) is never returned: it is leaked on purpose rather than reused under a pending
// copy.
#include <cstddef>
#include <vector>

namespace rf::comm::nccl {

struct StagingSlot {
  void* host = nullptr;    // pinned (cudaMallocHost)
  void* device = nullptr;  // cudaMalloc on the pool's GPU
  size_t bytes = 0;
  int device_index = 0;
};

// The pool's two rules, pure (tests/comm/test_nccl_staging.cpp):
// a new slot's size: 4 KiB doubled until it holds `bytes`, so a growing blob reallocates
// log2 times at most;
inline size_t staging_slot_bytes(size_t bytes) {
  size_t size = 4096;
  while (size < bytes) size *= 2;
  return size;
}
// which free slot serves `bytes`: the smallest that fits (so a small blob does not hold
// the large one), -1 when none does.
inline int pick_staging_slot(const std::vector<StagingSlot>& free, size_t bytes) {
  int best = -1;
  for (size_t i = 0; i < free.size(); ++i)
    if (free[i].bytes >= bytes && (best < 0 || free[i].bytes < free[static_cast<size_t>(best)].bytes))
      best = static_cast<int>(i);
  return best;
}

// A slot of at least `bytes` on GPU `device_index` (made current for the allocation).
// Throws rf::Error naming the GPU and the size when an allocation fails.
StagingSlot acquire_staging(int device_index, size_t bytes);
// Gives `slot` back for reuse; its copies must have completed.
void release_staging(const StagingSlot& slot);

}  // namespace rf::comm::nccl
