#include "comm/nccl/staging.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include "base/error.h"
#include "base/str.h"

namespace rf::comm::nccl {

namespace {

std::mutex pool_mu;
// Free slots per GPU. A few per process (one per host operation in flight at once).
std::map<int, std::vector<StagingSlot>>& free_slots() {
  static std::map<int, std::vector<StagingSlot>> slots;
  return slots;
}

[[noreturn]] void alloc_failed(const char* what, int device, size_t bytes, cudaError_t e) {
  throw rf::Error(rf::str("NCCL staging on cuda:", device, ": ", what, " of ", bytes, " bytes failed: ",
                          cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"));
}

}  // namespace

StagingSlot acquire_staging(int device_index, size_t bytes) {
  {
    std::lock_guard lk(pool_mu);
    auto& slots = free_slots()[device_index];
    // The smallest free slot that fits, so small blobs do not hold the large one.
    auto best = slots.end();
    for (auto it = slots.begin(); it != slots.end(); ++it)
      if (it->bytes >= bytes && (best == slots.end() || it->bytes < best->bytes)) best = it;
    if (best != slots.end()) {
      StagingSlot s = *best;
      slots.erase(best);
      return s;
    }
  }
  // Grown by doubling from 4 KiB, so a growing blob size reallocates log2 times at most.
  size_t size = 4096;
  while (size < bytes) size *= 2;
  StagingSlot s;
  s.bytes = size;
  s.device_index = device_index;
  if (cudaError_t e = cudaMallocHost(&s.host, size); e != cudaSuccess) alloc_failed("cudaMallocHost", device_index, size, e);
  if (cudaError_t e = cudaMalloc(&s.device, size); e != cudaSuccess) {
    cudaFreeHost(s.host);
    alloc_failed("cudaMalloc", device_index, size, e);
  }
  return s;
}

void release_staging(const StagingSlot& slot) {
  if (slot.host == nullptr) return;
  std::lock_guard lk(pool_mu);
  free_slots()[slot.device_index].push_back(slot);
}

}  // namespace rf::comm::nccl
