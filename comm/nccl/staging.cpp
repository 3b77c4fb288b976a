#include "comm/nccl/staging.h"

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <vector>

#include "base/error.h"
#include "base/str.h"

namespace rf::comm::nccl {

namespace {

std::mutex pool_mu;
// Free slots per GPU. A few per process (one per host operation in flight at once).
// Never destroyed: a teardown's host function (~NcclCommunicator) may give slots back on a
// stream thread while the process exits.
std::map<int, std::vector<StagingSlot>>& free_slots() {
  static auto* slots = new std::map<int, std::vector<StagingSlot>>;
  return *slots;
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
    if (const int i = pick_staging_slot(slots, bytes); i >= 0) {
      StagingSlot s = slots[static_cast<size_t>(i)];
      slots.erase(slots.begin() + i);
      return s;
    }
  }
  const size_t size = staging_slot_bytes(bytes);
  // On the pool's GPU. The calling thread is bound to it already (the communicator's
  // device, nccl_impl.h "Devices"); nothing switches back, since switching to a device
  // without a context (device 0) would create one there.
  if (int current = -1; cudaGetDevice(&current) != cudaSuccess || current != device_index) cudaSetDevice(device_index);
  StagingSlot s;
  s.bytes = size;
  s.device_index = device_index;
  if (cudaError_t e = cudaMallocHost(&s.host, size); e != cudaSuccess)
    alloc_failed("cudaMallocHost", device_index, size, e);
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
